//! The HTTP transport shared by the real providers (features `openai` and `anthropic`).
//!
//! Each provider model holds one [`reqwest`] client (rustls, no OpenSSL), shared by its
//! clones, and applies the [`HttpConfig`]: a connect timeout, a timeout for the response
//! headers, an idle timeout between streamed events, and a [`RetryPolicy`]. The
//! server-sent-events framing is parsed by `eventsource-stream`; each provider decodes
//! the events into [`ModelChunk`]s.
//!
//! # Errors
//! Every failure is a [`ModelError`] whose [`ModelErrorKind`] says what happened:
//!
//! | what | kind | retried |
//! |---|---|---|
//! | HTTP 401, 403 | `Authentication` | no |
//! | HTTP 429 | `RateLimit` | yes |
//! | HTTP 400, 404, 422, other 4xx | `BadRequest` (with the server's `error.message`) | no |
//! | HTTP 408, no response headers within `request_timeout`, no event within `idle_timeout` | `Timeout` | yes |
//! | HTTP 5xx (including Anthropic's 529) | `Server` | yes |
//! | connection refused / reset / DNS failure | `Other` | yes |
//! | the connection breaks mid-body, or the body ends before the terminal event (`[DONE]`, `message_stop`) | `Stream` | yes |
//! | malformed SSE (invalid UTF-8) or a payload that is not JSON | `Stream` (quoting the payload, truncated) | no |
//! | an error event inside the stream | by its type (`overloaded` → `Server`, ...) | `Server`, `RateLimit` |
//! | a 2xx answer that is not `text/event-stream` | `Stream` (quoting the body) | no |
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

use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use eventsource_stream::{Event, EventStreamError, Eventsource};
use futures::StreamExt;
use futures::stream::BoxStream;
use indexmap::IndexMap;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::{Response, StatusCode};
use serde_json::{Map, Value};

use super::{GenerateOptions, ModelChunk, ModelError, ModelErrorKind, ModelStream};
use crate::error::{BuildError, BuildErrorKind};
use crate::util::truncate;

/// How many bytes of an offending payload an error message quotes.
pub(crate) const QUOTE_BYTES: usize = 200;

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
        base.mul_f64(1.0 - 0.25 * random_unit())
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
    /// The longest wait for the next event of a streamed response (default 300 s:
    /// reasoning models may think silently for minutes; SSE comments do not count as
    /// events). Expiry is a [`ModelErrorKind::Timeout`], retried only before the first
    /// content chunk was delivered.
    pub idle_timeout: Duration,
    /// Retries; see [`RetryPolicy`].
    pub retry: RetryPolicy,
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(120),
            idle_timeout: Duration::from_secs(300),
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

/// The SSE events of one response.
type Events = BoxStream<'static, Result<Event, EventStreamError<reqwest::Error>>>;

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
    events: Option<Events>,
    pending: VecDeque<ModelChunk>,
    attempt: u32,
    delivered: bool,
    done: bool,
}

impl<D: Decoder> Call<D> {
    async fn next_item(&mut self) -> Option<Result<ModelChunk, ModelError>> {
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
                None => self.open().await.map(|events| {
                    self.events = Some(events);
                }),
                Some(_) => self.read().await,
            };
            if let Err(failure) = step {
                self.events = None;
                if let Some(wait) = self.retry_delay(&failure) {
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

    /// How long to wait before retrying `failure`, or `None` to give up.
    fn retry_delay(&self, failure: &Failure) -> Option<Duration> {
        let policy = &self.transport.http.retry;
        if !failure.retryable || self.delivered || self.attempt >= policy.max_attempts.max(1) {
            return None;
        }
        match failure.retry_after {
            Some(wait) if wait > policy.max_retry_after => None,
            Some(wait) => Some(wait),
            None => Some(policy.backoff(self.attempt)),
        }
    }

    /// Sends the request (one attempt) and checks the response status.
    async fn open(&mut self) -> Result<Events, Failure> {
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
        let response = match tokio::time::timeout(t.http.request_timeout, send).await {
            Err(_) => {
                return Err(Failure::retryable(ModelError::new(
                    ModelErrorKind::Timeout,
                    format!(
                        "no response from {} within {:?}",
                        t.url, t.http.request_timeout
                    ),
                )));
            }
            Ok(Err(e)) => return Err(send_failure(&t.url, &e)),
            Ok(Ok(r)) => r,
        };
        let status = response.status();
        if !status.is_success() {
            return Err(status_failure(t, response).await);
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        if !content_type.is_empty() && !content_type.starts_with("text/event-stream") {
            let body = read_body(t, response).await;
            return Err(Failure::fatal(ModelError::new(
                ModelErrorKind::Stream,
                format!(
                    "{} answered {status} with `{content_type}` instead of an event stream: {}",
                    t.url,
                    truncate(&body, QUOTE_BYTES)
                ),
            )));
        }
        Ok(response.bytes_stream().eventsource().boxed())
    }

    /// Reads the next SSE event (within the idle timeout) and decodes it.
    async fn read(&mut self) -> Result<(), Failure> {
        let idle = self.transport.http.idle_timeout;
        let Some(events) = self.events.as_mut() else {
            return Ok(());
        };
        let next = match tokio::time::timeout(idle, events.next()).await {
            Err(_) => {
                return Err(Failure::retryable(ModelError::new(
                    ModelErrorKind::Timeout,
                    format!("the stream was silent for {idle:?}"),
                )));
            }
            Ok(next) => next,
        };
        match next {
            None => {
                self.events = None;
                if self.decoder.complete_without_terminal() {
                    self.done = true;
                    return Ok(());
                }
                Err(Failure::retryable(ModelError::new(
                    ModelErrorKind::Stream,
                    "the stream ended before its terminal event",
                )))
            }
            Some(Err(e)) => Err(event_failure(e)),
            Some(Ok(event)) => match self.decoder.decode(&event, &mut self.pending) {
                Ok(Flow::More) => Ok(()),
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
            },
        }
    }
}

/// A typed failure for a non-success response, with the server's message.
async fn status_failure(transport: &Transport, response: Response) -> Failure {
    let status = response.status();
    let headers = response.headers().clone();
    let body = read_body(transport, response).await;
    let detail = error_message(&body).unwrap_or_else(|| truncate(body.trim(), QUOTE_BYTES));
    let request_id = ["x-request-id", "request-id"]
        .iter()
        .find_map(|h| headers.get(*h).and_then(|v| v.to_str().ok()))
        .map(|id| format!(" (request id {id})"))
        .unwrap_or_default();
    let retry_after = retry_after(&headers, SystemTime::now());
    let wait = retry_after
        .map(|d| format!("; the server asked to retry after {d:?}"))
        .unwrap_or_default();
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

/// The body of an error response, as text (within the idle timeout; empty when it
/// cannot be read).
async fn read_body(transport: &Transport, response: Response) -> String {
    let idle = transport.http.idle_timeout;
    match tokio::time::timeout(idle, response.bytes()).await {
        Ok(Ok(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
        _ => String::new(),
    }
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

/// The error for a failed SSE read: a broken connection (retryable before delivery),
/// or a payload that is not valid SSE text (named, truncated).
fn event_failure(e: EventStreamError<reqwest::Error>) -> Failure {
    match e {
        EventStreamError::Transport(e) => Failure::retryable(ModelError::new(
            ModelErrorKind::Stream,
            format!("the connection failed mid-stream: {}", chain(&e)),
        )),
        EventStreamError::Utf8(e) => Failure::fatal(ModelError::new(
            ModelErrorKind::Stream,
            format!(
                "malformed event stream: invalid UTF-8 in `{}`",
                truncate(&String::from_utf8_lossy(e.as_bytes()), QUOTE_BYTES)
            ),
        )),
        EventStreamError::Parser(e) => Failure::fatal(ModelError::new(
            ModelErrorKind::Stream,
            format!(
                "malformed event stream line `{}`",
                truncate(&e.input, QUOTE_BYTES)
            ),
        )),
    }
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

/// A non-negative integer field of a JSON object (0 when absent or not a number).
pub(crate) fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
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
/// an HTTP date (relative to `now`).
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = get("retry-after-ms").and_then(|v| v.parse::<f64>().ok())
        && ms.is_finite()
        && ms >= 0.0
    {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    let value = get(RETRY_AFTER.as_str())?;
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
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
