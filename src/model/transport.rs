//! The HTTP transport shared by the real providers (features `openai` and `anthropic`).
//!
//! Each provider model holds one [`reqwest`] client (rustls, no OpenSSL), shared by its
//! clones, and applies the [`HttpConfig`]: a connect timeout, a timeout for the response
//! headers, an idle timeout while the stream makes no progress, a total deadline per
//! model call, size limits on what the server sends, and a [`RetryPolicy`]. The
//! server-sent-events framing is parsed by a small linear parser of this crate (cost
//! proportional to the bytes received, memory bounded by the limits below); each
//! provider decodes the events into [`ModelChunk`]s.
//!
//! # Limits
//! Everything a server sends is bounded, so a hostile or broken server (often a
//! third-party gateway) cannot make a call hang, spin or grow without end:
//!
//! | limit | default | when exceeded |
//! |---|---|---|
//! | [`HttpConfig::max_line_bytes`]: one SSE line | 2 MiB | `Stream` error naming the limit, not retried |
//! | [`HttpConfig::max_event_bytes`]: the data of one SSE event | 4 MiB | `Stream` error naming the limit, not retried |
//! | error bodies and unexpected (non-event-stream) bodies | 8 KiB read ([`ERROR_BODY_BYTES`]) | the rest is not read; the connection is dropped |
//! | [`HttpConfig::idle_timeout`]: time without progress | 300 s | `Timeout` |
//! | [`HttpConfig::total_timeout`]: the whole model call, retries included | 10 min | `Deadline`, not retried |
//! | [`RetryPolicy::max_retry_after`]: a server-requested wait | 60 s | the server's error (e.g. `RateLimit`), not retried |
//!
//! *Progress* is an event that yields a chunk: text, thinking, a tool-call fragment,
//! usage or a finish reason. SSE comments, Anthropic `ping` events and empty deltas
//! (an OpenAI chunk with no content, tool call, usage or finish reason) do not reset
//! the idle timer. Token counts off the wire are added with saturating arithmetic, and
//! a `Retry-After` of any size (`1e300`, `inf`) is a wait, never a panic (negative and
//! `NaN` values are ignored).
//!
//! # Errors
//! Every failure is a [`ModelError`] whose [`ModelErrorKind`] says what happened:
//!
//! | what | kind | retried |
//! |---|---|---|
//! | HTTP 401, 403 | `Authentication` | no |
//! | HTTP 429 | `RateLimit` | yes |
//! | HTTP 400, 404, 422, other 4xx | `BadRequest` (with the server's `error.message`) | no |
//! | HTTP 408, no response headers within `request_timeout`, no progress within `idle_timeout` | `Timeout` | yes |
//! | the call as a whole passed `total_timeout` | `Deadline` | no |
//! | HTTP 5xx (including Anthropic's 529) | `Server` | yes |
//! | connection refused / reset / DNS failure | `Other` | yes |
//! | the connection breaks mid-body, or the body ends before the terminal event (`[DONE]`, `message_stop`) | `Stream` | yes |
//! | malformed SSE (invalid UTF-8) or a payload that is not JSON | `Stream` (quoting the payload, truncated) | no |
//! | an SSE line or event over its limit | `Stream` (naming the limit) | no |
//! | an error event inside the stream | by its type (`overloaded` → `Server`, ...) | `Server`, `RateLimit` |
//! | a 2xx answer that is not `text/event-stream` | `Stream` (quoting the body's start) | no |
//!
//! Error messages name the URL, the status, the server's request id when it sent one,
//! and the wait the server asked for.
//!
//! # Retries
//! - "Retried" above holds only *before any content chunk was delivered*: once text,
//!   thinking or a tool-call fragment has been handed to the caller, nothing is
//!   retried, because the caller has seen part of an answer and a second attempt would
//!   produce a different one. (Usage and finish chunks do not count: a retry only makes
//!   later ones replace them.)
//! - At most [`RetryPolicy::max_attempts`] attempts in all; the last failure is
//!   returned.
//! - The delay before retry `n` (from 1) is `min(initial_backoff · 2ⁿ⁻¹, max_backoff)`
//!   minus up to 25% random jitter, unless the server said when to come back
//!   (`retry-after-ms`, or `Retry-After` in seconds or as an HTTP date): then exactly
//!   that, or no retry at all when it exceeds [`RetryPolicy::max_retry_after`].
//! - A retry whose delay would end after the call's total deadline is not attempted:
//!   the failure is returned at once.

use std::collections::VecDeque;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use indexmap::IndexMap;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Response, StatusCode};
use serde_json::{Map, Value};

use tokio::time::Instant;

use super::sse::{Event, SseError, SseParser};
use super::{GenerateOptions, ModelChunk, ModelError, ModelErrorKind, ModelStream};
use crate::error::{BuildError, BuildErrorKind};
use crate::util::truncate;

/// How many bytes of an offending payload an error message quotes.
pub(crate) const QUOTE_BYTES: usize = 200;

/// How many bytes of an error body (non-2xx) or of an unexpected 2xx body (not an
/// event stream) are read, for the error message: 8 KiB. The rest is never read; the
/// connection is dropped.
pub const ERROR_BODY_BYTES: usize = 8 * 1024;

/// How failed attempts are retried. Plain public fields; start from
/// [`RetryPolicy::default`] (or [`RetryPolicy::none`]) and override what you need.
///
/// See the [module docs](self) for which failures are retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (default 3). `0` counts as `1`.
    pub max_attempts: u32,
    /// Backoff before the first retry (default 500 ms); doubles per retry.
    pub initial_backoff: Duration,
    /// Upper bound of the computed backoff (default 8 s).
    pub max_backoff: Duration,
    /// The longest server-requested wait (`Retry-After`) that is honoured (default
    /// 60 s). A longer one ends the call at once with the server's error, which names
    /// the requested wait.
    pub max_retry_after: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// One attempt, no retries.
    pub fn none() -> Self {
        Self {
            max_attempts: 1,
            ..Self::default()
        }
    }

    /// The computed (jittered) backoff before retry `retry` (from 1).
    fn backoff(&self, retry: u32) -> Duration {
        let exp = self
            .initial_backoff
            .saturating_mul(2u32.saturating_pow(retry.saturating_sub(1)));
        let base = exp.min(self.max_backoff);
        // `Duration::mul_f64` panics when the product rounds past `Duration::MAX`.
        Duration::try_from_secs_f64(base.as_secs_f64() * (1.0 - 0.25 * random_unit()))
            .map_or(base, |d| d.min(base))
    }
}

/// HTTP settings of a provider. Plain public fields; start from
/// [`HttpConfig::default`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpConfig {
    /// Timeout for establishing a connection (TCP and TLS), per attempt (default 10 s).
    pub connect_timeout: Duration,
    /// Timeout from sending a request to receiving the response headers, per attempt
    /// (default 120 s). Expiry is a [`ModelErrorKind::Timeout`] and is retried.
    pub request_timeout: Duration,
    /// The longest time a streamed response may go without progress (default 300 s:
    /// reasoning models may think silently for minutes). Progress is an event that
    /// yields text, thinking, a tool-call fragment, usage or a finish reason; SSE
    /// comments, Anthropic `ping` events and empty deltas do not count. Expiry is a
    /// [`ModelErrorKind::Timeout`], retried only before the first content chunk was
    /// delivered.
    pub idle_timeout: Duration,
    /// The deadline of one model call as a whole, from its first request to its last
    /// chunk, retries and their delays included (default 10 minutes; `None`: no
    /// deadline). Expiry is a [`ModelErrorKind::Deadline`] and is not retried. It is
    /// what ends a stream that keeps sending progress forever.
    pub total_timeout: Option<Duration>,
    /// The longest SSE line accepted, in bytes, without its line end (default 2 MiB).
    /// A longer one ends the call with a [`ModelErrorKind::Stream`] error naming this
    /// limit (not retried), as soon as the line passes it.
    pub max_line_bytes: usize,
    /// The largest SSE event accepted: the bytes of its `data` and `event` values
    /// together (default 4 MiB). A larger one ends the call with a
    /// [`ModelErrorKind::Stream`] error naming this limit (not retried).
    pub max_event_bytes: usize,
    /// Retries; see [`RetryPolicy`].
    pub retry: RetryPolicy,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(300),
            total_timeout: Some(Duration::from_secs(600)),
            max_line_bytes: 2 * 1024 * 1024,
            max_event_bytes: 4 * 1024 * 1024,
            retry: RetryPolicy::default(),
        }
    }
}

/// Settings every provider builder shares. `Debug` redacts the API key.
#[derive(Clone, Default)]
pub(crate) struct Endpoint {
    pub(crate) base_url: Option<String>,
    pub(crate) api_key: Option<String>,
    pub(crate) model: Option<String>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) http: HttpConfig,
}

/// The setters every provider builder has; expands inside `impl XBuilder { .. }` for a
/// builder with an `endpoint: Endpoint` field.
macro_rules! endpoint_setters {
    ($default_base:literal) => {
        #[doc = concat!("Sets the base URL (default `", $default_base, "`).")]
        pub fn base_url(mut self, url: impl Into<String>) -> Self {
            self.endpoint.base_url = Some(url.into());
            self
        }

        /// Sets the API key.
        pub fn api_key(mut self, key: impl Into<String>) -> Self {
            self.endpoint.api_key = Some(key.into());
            self
        }

        /// Sets the model name sent on the wire (required).
        pub fn model(mut self, model: impl Into<String>) -> Self {
            self.endpoint.model = Some(model.into());
            self
        }

        /// Adds an HTTP header sent with every request (after the provider's own
        /// headers, so it can override them; per-call
        /// [`GenerateOptions::extra_headers`](crate::GenerateOptions::extra_headers)
        /// come last).
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.endpoint.headers.push((name.into(), value.into()));
            self
        }

        /// Replaces the HTTP settings (timeouts and retries).
        pub fn http(mut self, http: $crate::model::HttpConfig) -> Self {
            self.endpoint.http = http;
            self
        }

        /// Replaces the retry policy only.
        pub fn retry(mut self, retry: $crate::model::RetryPolicy) -> Self {
            self.endpoint.http.retry = retry;
            self
        }
    };
}
pub(crate) use endpoint_setters;

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("model", &self.model)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("http", &self.http)
            .finish()
    }
}

impl Endpoint {
    /// Fills unset fields from the environment variables named `key`, `base` and
    /// `model`, with `default_model` when the model variable is unset too.
    pub(crate) fn fill_from_env(
        &mut self,
        key: &str,
        base: &str,
        model: &str,
        default_model: &str,
    ) {
        let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        if self.api_key.is_none() {
            self.api_key = var(key);
        }
        if self.base_url.is_none() {
            self.base_url = var(base);
        }
        if self.model.is_none() {
            self.model = Some(var(model).unwrap_or_else(|| default_model.to_owned()));
        }
    }

    /// For `from_env()`: an API key is required unless a base URL was given (local
    /// OpenAI-compatible servers often need none).
    pub(crate) fn require_key(&self, key_var: &str) -> Result<(), BuildError> {
        if self.api_key.is_none() && self.base_url.is_none() {
            return Err(BuildError::new(
                BuildErrorKind::InvalidConfig,
                format!("{key_var} is not set"),
            ));
        }
        Ok(())
    }

    /// The model name, required.
    pub(crate) fn model_name(&self) -> Result<String, BuildError> {
        self.model
            .clone()
            .filter(|m| !m.trim().is_empty())
            .ok_or_else(|| {
                BuildError::new(
                    BuildErrorKind::InvalidConfig,
                    "no model name: call .model(..) on the provider builder",
                )
            })
    }
}

/// A built client for one endpoint URL.
#[derive(Clone, Debug)]
pub(crate) struct Transport {
    client: reqwest::Client,
    url: reqwest::Url,
    headers: HeaderMap,
    http: HttpConfig,
}

impl Transport {
    /// Builds the client. `base_url` is the configured (or default) base, `path` is
    /// appended after a `/`; `headers` are the provider's fixed headers followed by
    /// the user's.
    pub(crate) fn new(
        base_url: &str,
        path: &str,
        headers: &[(String, String)],
        http: &HttpConfig,
    ) -> Result<Self, BuildError> {
        let invalid = |m: String| BuildError::new(BuildErrorKind::InvalidConfig, m);
        let joined = format!("{}/{}", base_url.trim_end_matches('/'), path);
        let url = reqwest::Url::parse(&joined)
            .map_err(|e| invalid(format!("invalid base URL `{base_url}`: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid(format!(
                "invalid base URL `{base_url}`: the scheme must be http or https"
            )));
        }
        let mut map = HeaderMap::new();
        insert_headers(
            &mut map,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .map_err(|e| invalid(e.message().to_owned()))?;
        // One client (connection pool, TLS setup) per model, shared by its clones.
        let client = reqwest::Client::builder()
            .connect_timeout(http.connect_timeout)
            .build()
            .map_err(|e| invalid(format!("cannot build the HTTP client: {}", chain(&e))))?;
        Ok(Self {
            client,
            url,
            headers: map,
            http: http.clone(),
        })
    }

    /// The endpoint URL.
    pub(crate) fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Streams the response to `body` (plus the per-call `extra_headers`) through
    /// `decoder`. A `body` error is the stream's only item.
    pub(crate) fn stream<D: Decoder>(
        &self,
        body: Result<Value, ModelError>,
        extra_headers: &IndexMap<String, String>,
        decoder: D,
    ) -> ModelStream {
        let prepared = (|| {
            let mut headers = self.headers.clone();
            insert_headers(
                &mut headers,
                extra_headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
            )?;
            let body = serde_json::to_vec(&body?).map_err(|e| {
                ModelError::new(
                    ModelErrorKind::BadRequest,
                    format!("cannot serialize the request: {e}"),
                )
            })?;
            Ok::<_, ModelError>((headers, body))
        })();
        let (headers, body) = match prepared {
            Ok(p) => p,
            Err(e) => return Box::pin(futures::stream::iter([Err(e)])),
        };
        let state = Call {
            transport: self.clone(),
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
        Box::pin(futures::stream::unfold(state, |mut call| async move {
            call.next_item().await.map(|item| (item, call))
        }))
    }
}

/// Inserts `(name, value)` pairs, replacing earlier values of the same name.
fn insert_headers<'a>(
    map: &mut HeaderMap,
    headers: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Result<(), ModelError> {
    for (name, value) in headers {
        let bad = |what: &str| {
            ModelError::new(
                ModelErrorKind::BadRequest,
                format!("invalid HTTP header {what} for `{name}`"),
            )
        };
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|_| bad("name"))?;
        let mut v = HeaderValue::from_str(value).map_err(|_| bad("value"))?;
        // Credentials never show in `Debug` output or logs.
        if matches!(n.as_str(), "authorization" | "x-api-key" | "api-key") {
            v.set_sensitive(true);
        }
        map.insert(n, v);
    }
    Ok(())
}

/// What a provider's decoder says about one SSE event.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Keep reading.
    More,
    /// The terminal event: the answer is complete.
    Done,
}

/// Turns one provider's SSE events into chunks. Cloned fresh for each attempt.
pub(crate) trait Decoder: Clone + Send + 'static {
    /// Decodes one event, pushing chunks onto `out`. An `Err` ends the stream; its kind
    /// decides whether an attempt that delivered nothing yet is retried.
    fn decode(&mut self, event: &Event, out: &mut VecDeque<ModelChunk>)
    -> Result<Flow, ModelError>;

    /// Whether a body that ends without the terminal event is still a complete answer
    /// (e.g. a finish reason was already seen). Default: no.
    fn complete_without_terminal(&self) -> bool {
        false
    }
}

/// One response body being read: the parser and the events it completed but the
/// decoder has not seen yet.
struct Body {
    response: Response,
    parser: SseParser,
    ready: VecDeque<Event>,
    /// When the stream last made progress (or its headers arrived).
    progress: Instant,
}

/// A failure and whether another attempt may fix it.
struct Failure {
    error: ModelError,
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
fn after(d: Duration) -> Option<Instant> {
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
async fn within<F: Future>(until: Option<Instant>, f: F) -> Option<F::Output> {
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
            Some(Err(e)) => return Err(send_failure(&t.url, &e)),
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
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !content_type.is_empty() && !content_type.starts_with("text/event-stream") {
            let body = read_prefix(response, body_until).await;
            return Err(Failure::fatal(ModelError::new(
                ModelErrorKind::Stream,
                format!(
                    "{} answered {status} with `{content_type}` instead of an event stream: {}",
                    t.url,
                    truncate(&body, QUOTE_BYTES)
                ),
            )));
        }
        Ok(Body {
            response,
            parser: SseParser::new(t.http.max_line_bytes, t.http.max_event_bytes),
            ready: VecDeque::new(),
            progress: Instant::now(),
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
            if let Some(event) = body.ready.pop_front() {
                let before = self.pending.len();
                return match self.decoder.decode(&event, &mut self.pending) {
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
            let (until, by_deadline) = cap(body.progress.checked_add(idle), deadline);
            match within(until, body.response.chunk()).await {
                None if by_deadline => return Err(deadline_failure(t)),
                None => {
                    return Err(Failure::retryable(ModelError::new(
                        ModelErrorKind::Timeout,
                        format!(
                            "the stream made no progress for {idle:?} (HttpConfig::idle_timeout; \
                             pings, comments and empty deltas do not count)"
                        ),
                    )));
                }
                Some(Err(e)) => {
                    return Err(Failure::retryable(ModelError::new(
                        ModelErrorKind::Stream,
                        format!("the connection failed mid-stream: {}", chain(&e)),
                    )));
                }
                Some(Ok(Some(bytes))) => body
                    .parser
                    .feed(&bytes, &mut body.ready)
                    .map_err(|e| sse_failure(t, &e))?,
                Some(Ok(None)) => {
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

/// The error for a body that is not acceptable SSE (never retried: the server would
/// send the same again).
fn sse_failure(transport: &Transport, e: &SseError) -> Failure {
    let message = match e {
        SseError::Utf8(_) => e.to_string(),
        _ => format!("{} sent {e}", transport.url),
    };
    Failure::fatal(ModelError::new(ModelErrorKind::Stream, message))
}

/// A typed failure for a non-success response, with the server's message.
async fn status_failure(
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
pub(crate) fn error_message(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let err = v.get("error").unwrap_or(&v);
    let msg = match err {
        Value::String(s) => s.clone(),
        _ => err.get("message")?.as_str()?.to_owned(),
    };
    Some(truncate(&msg, 1000))
}

/// The error and retry decision for a failed `send()`.
fn send_failure(url: &reqwest::Url, e: &reqwest::Error) -> Failure {
    if e.is_builder() {
        return Failure::fatal(ModelError::new(
            ModelErrorKind::BadRequest,
            format!("cannot build the request to {url}: {}", chain(e)),
        ));
    }
    let (kind, what) = if e.is_timeout() {
        (ModelErrorKind::Timeout, "timed out")
    } else if e.is_connect() {
        (ModelErrorKind::Other, "could not connect")
    } else {
        (ModelErrorKind::Other, "failed")
    };
    Failure::retryable(ModelError::new(
        kind,
        format!("the request to {url} {what}: {}", chain(e)),
    ))
}

/// The error for an error object a provider sent inside the stream (`error.type` or
/// `error.code` decides the kind; unknown ones count as server errors).
pub(crate) fn stream_error(error: &Value) -> ModelError {
    let text = |k: &str| match error.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    };
    let tag = format!("{} {}", text("type"), text("code"));
    let kind = if tag.contains("rate_limit") || tag.contains("429") {
        ModelErrorKind::RateLimit
    } else if tag.contains("auth") || tag.contains("permission") || tag.contains("api_key") {
        ModelErrorKind::Authentication
    } else if tag.contains("invalid_request")
        || tag.contains("not_found")
        || tag.contains("too_large")
    {
        ModelErrorKind::BadRequest
    } else {
        ModelErrorKind::Server
    };
    let message = match error {
        Value::String(s) => s.clone(),
        _ => text("message"),
    };
    let tag = tag.trim();
    let tag = if tag.is_empty() {
        String::new()
    } else {
        format!(" ({tag})")
    };
    ModelError::new(
        kind,
        format!(
            "the server sent an error mid-stream{tag}: {}",
            truncate(&message, 1000)
        ),
    )
}

/// A stream error for an event that lacks a required field, quoting the payload.
pub(crate) fn malformed(what: &str, data: &str) -> ModelError {
    ModelError::new(
        ModelErrorKind::Stream,
        format!(
            "malformed event ({what}): `{}`",
            truncate(data, QUOTE_BYTES)
        ),
    )
}

/// The fields every provider's request body starts with: `model` (the per-call
/// override, else the configured name) and `stream: true`.
pub(crate) fn body_start(options: &GenerateOptions, model: &str) -> Map<String, Value> {
    let mut body = Map::new();
    let model = options.model.as_deref().unwrap_or(model);
    body.insert("model".into(), model.into());
    body.insert("stream".into(), true.into());
    body
}

/// Adds the options' `extra_body` fields (overriding any of the same name).
pub(crate) fn body_finish(mut body: Map<String, Value>, options: &GenerateOptions) -> Value {
    for (k, v) in &options.extra_body {
        body.insert(k.clone(), v.clone());
    }
    Value::Object(body)
}

/// Inserts `key` into a request body when `value` is set.
pub(crate) fn put(body: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(v) = value {
        body.insert(key.to_owned(), v.into());
    }
}

/// A non-negative integer field of a JSON object: 0 when absent, negative or not a
/// number; a fractional or out-of-range number saturates (`1e30` reads as `u64::MAX`).
/// Sums of these values must saturate too (`saturating_add`): a server may send
/// `u64::MAX`.
pub(crate) fn u64_field(v: &Value, key: &str) -> u64 {
    match v.get(key) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or_else(|| {
            // `as` saturates: huge values become `u64::MAX`, negative ones 0.
            n.as_f64().map_or(0, |f| f as u64)
        }),
        _ => 0,
    }
}

/// A string field of a JSON object, when present and non-empty.
pub(crate) fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// `e` and its sources, joined with `": "`.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
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

/// A uniformly distributed number in `[0, 1)`, from the standard library's randomly
/// keyed hasher (jitter needs no cryptographic quality).
fn random_unit() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Parses an SSE `data` payload as JSON; a payload that is not JSON is a stream error
/// quoting it (truncated).
pub(crate) fn parse_json(data: &str) -> Result<Value, ModelError> {
    serde_json::from_str(data).map_err(|e| {
        ModelError::new(
            ModelErrorKind::Stream,
            format!(
                "malformed JSON in the event stream ({e}): `{}`",
                truncate(data, QUOTE_BYTES)
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn backoff_never_panics_at_the_largest_durations() {
        let p = RetryPolicy {
            initial_backoff: Duration::MAX,
            max_backoff: Duration::MAX,
            ..RetryPolicy::default()
        };
        for retry in [1, 2, 64, u32::MAX] {
            assert!(p.backoff(retry) <= Duration::MAX);
        }
    }

    #[test]
    fn token_fields_off_the_wire_saturate() {
        let v = serde_json::json!({"a": u64::MAX, "b": 1e30, "c": -3, "d": "7", "e": 2.5});
        assert_eq!(u64_field(&v, "a"), u64::MAX);
        assert_eq!(u64_field(&v, "b"), u64::MAX);
        assert_eq!(u64_field(&v, "c"), 0);
        assert_eq!(u64_field(&v, "d"), 0);
        assert_eq!(u64_field(&v, "e"), 2);
        assert_eq!(u64_field(&v, "missing"), 0);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_jitters_down_by_at_most_a_quarter() {
        let p = RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_millis(350),
            ..RetryPolicy::default()
        };
        for (retry, base) in [(1, 100), (2, 200), (3, 350), (10, 350), (40, 350)] {
            let d = p.backoff(retry);
            let base = Duration::from_millis(base);
            assert!(d <= base && d >= base.mul_f64(0.75), "{retry}: {d:?}");
        }
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
