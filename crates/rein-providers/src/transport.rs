//! The HTTP transport shared by the real providers (features `openai` and `anthropic`).
//!
//! Each provider model holds one [`reqwest`] client, shared by its clones: HTTP/1.1 or
//! HTTP/2 (negotiated) over rustls, no OpenSSL. rustls needs a process-wide crypto
//! provider: before building its first client rein installs rustls's `ring` provider as
//! the process default, unless the application installed one first (install yours, e.g.
//! aws-lc-rs, before building a model to use it instead). The client applies the [`HttpConfig`]: a connect timeout, a timeout for the response
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
//! | a 2xx answer that is not `text/event-stream`, or has no content type (unless [`HttpConfig::accept_missing_content_type`]) | `Stream` (quoting the body's start) | no |
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

mod call;
mod json;

use std::collections::VecDeque;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, SystemTime};

use indexmap::IndexMap;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use serde_json::{Map, Value};

use crate::sse::Event;
use crate::truncate;
use rein_core::model::{GenerateOptions, ModelChunk, ModelError, ModelErrorKind, ModelStream};
use rein_core::{BuildError, BuildErrorKind};

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
    ///
    /// Kept hand-written rather than a backoff crate (`backon`, `backoff`): this is the
    /// whole schedule (double, cap, jitter down by at most a quarter), while what makes
    /// the retry loop correct — waiting what a `Retry-After` asks, failing at once when
    /// that exceeds the cap, the per-call deadline, retrying only before the first
    /// content chunk — no such crate models; one would replace these lines, not the loop.
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
    /// Whether a 2xx answer without a `Content-Type` header is read as an event stream
    /// (default `false`). Off, such an answer is a [`ModelErrorKind::Stream`] error
    /// saying no content type arrived and quoting the body's start (its first
    /// [`ERROR_BODY_BYTES`] read, not retried), like any other non-event-stream answer;
    /// turn it on only for a server known to stream SSE without the header.
    pub accept_missing_content_type: bool,
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
            accept_missing_content_type: false,
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
#[cfg(any(feature = "openai", feature = "anthropic"))]
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
        /// [`GenerateOptions::extra_headers`](rein_core::GenerateOptions::extra_headers)
        /// come last).
        pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
            self.endpoint.headers.push((name.into(), value.into()));
            self
        }

        /// Replaces the HTTP settings (timeouts and retries).
        pub fn http(mut self, http: $crate::HttpConfig) -> Self {
            self.endpoint.http = http;
            self
        }

        /// Replaces the retry policy only.
        pub fn retry(mut self, retry: $crate::RetryPolicy) -> Self {
            self.endpoint.http.retry = retry;
            self
        }
    };
}
#[cfg(any(feature = "openai", feature = "anthropic"))]
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
        let url = http_url(&joined, "base URL", base_url)?;
        let mut map = HeaderMap::new();
        insert_headers(
            &mut map,
            headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )
        .map_err(|e| invalid(e.message().to_owned()))?;
        // One client (connection pool, TLS setup) per model, shared by its clones.
        crate::ensure_tls_provider();
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

    /// The same client, headers and settings for another endpoint of the same server:
    /// `url` (absolute, http or https) replaces the URL.
    pub(crate) fn at(&self, url: &str) -> Result<Self, BuildError> {
        Ok(Self {
            url: http_url(url, "URL", url)?,
            ..self.clone()
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
        let prepared = body.and_then(|b| self.prepare(&b, extra_headers));
        let (headers, body) = match prepared {
            Ok(p) => p,
            Err(e) => return Box::pin(futures::stream::iter([Err(e)])),
        };
        call::start(self.clone(), headers, body, decoder)
    }
}

impl Transport {
    /// Posts `body` (plus the per-call `extra_headers`) and reads one JSON answer (see
    /// `json::post`): the future owns what it needs.
    pub(crate) fn post_json(
        &self,
        body: &Value,
        extra_headers: &IndexMap<String, String>,
    ) -> impl Future<Output = Result<Value, ModelError>> + Send + use<> {
        let prepared = self.prepare(body, extra_headers);
        let transport = self.clone();
        async move {
            let (headers, body) = prepared?;
            json::post(transport, headers, body).await
        }
    }

    /// The headers (the fixed ones, then `extra_headers`) and the serialized `body` of
    /// one request.
    fn prepare(
        &self,
        body: &Value,
        extra_headers: &IndexMap<String, String>,
    ) -> Result<(HeaderMap, Vec<u8>), ModelError> {
        let mut headers = self.headers.clone();
        insert_headers(
            &mut headers,
            extra_headers.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )?;
        let body = serde_json::to_vec(body).map_err(|e| {
            ModelError::new(
                ModelErrorKind::BadRequest,
                format!("cannot serialize the request: {e}"),
            )
            .with_source(e)
        })?;
        Ok((headers, body))
    }
}

/// `url` parsed, when it is http or https; the error names `what` was configured as
/// `shown`.
fn http_url(url: &str, what: &str, shown: &str) -> Result<reqwest::Url, BuildError> {
    let invalid = |m: String| BuildError::new(BuildErrorKind::InvalidConfig, m);
    let parsed =
        reqwest::Url::parse(url).map_err(|e| invalid(format!("invalid {what} `{shown}`: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "invalid {what} `{shown}`: the scheme must be http or https"
        )));
    }
    Ok(parsed)
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
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|e| bad("name").with_source(e))?;
        let mut v = HeaderValue::from_str(value).map_err(|e| bad("value").with_source(e))?;
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
        .with_source(e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
