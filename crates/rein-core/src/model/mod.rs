//! Models: the streaming interface the agent loop talks to.
//!
//! A [`Model`] turns a [`ModelRequest`] (messages, the tool schemas offered, and the
//! effective [`GenerateOptions`]) into a stream of [`ModelChunk`]s: text and thinking
//! deltas, tool-call fragments, usage and a finish reason. The loop reassembles the
//! chunks into one assistant [`Msg`](crate::Msg), firing a `ReasoningChunk` (or
//! `SummaryChunk`) hook event per chunk for hooks that subscribed to it.
//!
//! Options are layered: the agent's defaults, then whatever `PreReasoning` hooks set.
//! [`GenerateOptions::merge`] is the field-wise merge hooks use to overlay their
//! changes on the effective options they are shown.
//!
//! [`ScriptedModel`] is the offline, deterministic model used by examples and tests.
//! [`replay`] records a real model's run to a fixture file ([`replay::RecordingModel`])
//! and serves it back offline ([`replay::ReplayModel`]).
//!
//! Real providers are behind cargo features and are used exactly like `ScriptedModel`:
//! `OpenAiChatModel` (feature `openai`: OpenAI and OpenAI-compatible chat completions)
//! and `AnthropicModel` (feature `anthropic`: the Messages API). Both stream over the
//! shared `transport` (timeouts, retries, typed errors).

pub mod accumulate;
pub mod capabilities;
mod format;
mod messages;
pub mod replay;
mod scripted;

pub use capabilities::ModelCapabilities;
pub use format::ResponseFormat;
pub use messages::Messages;
pub use scripted::{ScriptedModel, ScriptedTurn};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::tool::ToolSchema;

/// The stream a model returns: chunks in order, ending after the last one. An error
/// item ends the model call with that error.
pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelChunk, ModelError>> + Send>>;

/// A provider's count of a request's prompt tokens, from [`Model::count_tokens`]: `'static`
/// like [`ModelStream`], so it holds what it needs.
pub type TokenCount = Pin<Box<dyn Future<Output = Result<u64, ModelError>> + Send>>;

/// A streaming chat model.
///
/// Implementations must be cheap to call concurrently from many sessions. The stream is
/// `'static`: clone whatever client state it needs into it. Errors that happen before
/// the first chunk (connection, authentication) are reported as the stream's first item.
pub trait Model: Send + Sync + 'static {
    /// The model name reported in spans and events (e.g. `"gpt-4o"`).
    fn name(&self) -> &str;

    /// The provider name reported in spans (e.g. `"openai"`). Defaults to `"unknown"`.
    fn provider(&self) -> &str {
        "unknown"
    }

    /// What this model accepts (see [`ModelCapabilities`]); the agent reads it once per
    /// structured-output call to choose how the answer is asked for
    /// ([`OutputMode::Auto`](crate::agent::OutputMode::Auto)). Defaults to
    /// [`ModelCapabilities::PERMISSIVE`]; the HTTP providers report their table's entry
    /// for their model (or what their builder was given).
    fn capabilities(&self) -> ModelCapabilities {
        ModelCapabilities::PERMISSIVE
    }

    /// Starts one model call.
    fn stream(&self, request: ModelRequest) -> ModelStream;

    /// Counts the prompt tokens `request` would take, as the provider counts (and bills)
    /// them, or `None` when this model cannot count (the default).
    ///
    /// The agent asks only where the answer decides something: when a token or cost
    /// budget is close enough that the byte estimate could be wrong about admitting the
    /// request (see the [budget bound](crate::budget#the-bound)). A count that fails is
    /// logged and the estimate used instead. The HTTP providers count through the
    /// provider's counting endpoint where one is configured (Anthropic's
    /// `messages/count_tokens`; a llama.cpp server's `apply-template` + `tokenize`).
    fn count_tokens(&self, request: &ModelRequest) -> Option<TokenCount> {
        let _ = request;
        None
    }
}

impl<M: Model + ?Sized> Model for std::sync::Arc<M> {
    fn name(&self) -> &str {
        (**self).name()
    }
    fn provider(&self) -> &str {
        (**self).provider()
    }
    fn capabilities(&self) -> ModelCapabilities {
        (**self).capabilities()
    }
    fn stream(&self, request: ModelRequest) -> ModelStream {
        (**self).stream(request)
    }
    fn count_tokens(&self, request: &ModelRequest) -> Option<TokenCount> {
        (**self).count_tokens(request)
    }
}

/// What one model call is asked.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// The messages, system message first when the agent has a system prompt. The
    /// conversation part is shared with memory, not copied.
    pub messages: Messages,
    /// The tools offered, in toolkit registration order. Empty for the summary step.
    ///
    /// Shared, not copied: an agent computes its schemas once at `build()`, and every
    /// request of every call shares them (read them as a slice: `&request.tools[..]`,
    /// `request.tools.iter()`; build one from a `Vec` with `.into()`).
    pub tools: Arc<[ToolSchema]>,
    /// The effective options for this call.
    pub options: GenerateOptions,
}

/// How the model should choose tools.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// The model must not call tools.
    None,
    /// The model must call some tool.
    Required,
    /// The model must call this tool.
    Tool(String),
}

/// Generation options. Every field is optional; unset means "provider default" (or,
/// after a merge, "whatever the other side says").
///
/// Plain public fields, so options are written as
/// `GenerateOptions { temperature: Some(0.1), ..Default::default() }`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct GenerateOptions {
    /// Overrides the model name for this call, where the provider supports it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Sampling temperature.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// Top-k sampling.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    /// Maximum tokens to generate.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Reasoning effort (`"low"`, `"medium"`, `"high"`, provider-specific values).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<String>,
    /// Sampling seed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Stop sequences.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop: Option<Vec<String>>,
    /// Frequency penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frequency_penalty: Option<f64>,
    /// Presence penalty.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub presence_penalty: Option<f64>,
    /// Tool choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// Whether the model may request several tool calls in one turn.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// The shape the final answer must have (structured output; see
    /// [`ResponseFormat`]). Default `None`: free text. [`Agent::call_typed`] sets it for
    /// its call; a `PreReasoning` hook sees it and may change or clear it.
    ///
    /// [`Agent::call_typed`]: crate::Agent::call_typed
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_format: Option<ResponseFormat>,
    /// Extra HTTP headers for providers that send requests over HTTP.
    #[serde(skip_serializing_if = "IndexMap::is_empty")]
    pub extra_headers: IndexMap<String, String>,
    /// Extra top-level request body fields for providers that send JSON bodies.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub extra_body: Map<String, Value>,
}

impl GenerateOptions {
    /// Field-wise merge: every scalar field is `primary`'s where set, else `fallback`'s;
    /// `extra_headers` and `extra_body` are unioned with `primary`'s entries winning.
    ///
    /// ```
    /// use rein::GenerateOptions;
    /// let defaults = GenerateOptions { temperature: Some(0.7), max_tokens: Some(512), ..Default::default() };
    /// let precise = GenerateOptions { temperature: Some(0.1), ..Default::default() };
    /// let merged = GenerateOptions::merge(&precise, &defaults);
    /// assert_eq!(merged.temperature, Some(0.1));
    /// assert_eq!(merged.max_tokens, Some(512));
    /// ```
    pub fn merge(primary: &Self, fallback: &Self) -> Self {
        fn pick<T: Clone>(p: &Option<T>, f: &Option<T>) -> Option<T> {
            p.as_ref().or(f.as_ref()).cloned()
        }
        let mut extra_headers = fallback.extra_headers.clone();
        for (k, v) in &primary.extra_headers {
            extra_headers.insert(k.clone(), v.clone());
        }
        let mut extra_body = fallback.extra_body.clone();
        for (k, v) in &primary.extra_body {
            extra_body.insert(k.clone(), v.clone());
        }
        Self {
            model: pick(&primary.model, &fallback.model),
            temperature: pick(&primary.temperature, &fallback.temperature),
            top_p: pick(&primary.top_p, &fallback.top_p),
            top_k: pick(&primary.top_k, &fallback.top_k),
            max_tokens: pick(&primary.max_tokens, &fallback.max_tokens),
            reasoning_effort: pick(&primary.reasoning_effort, &fallback.reasoning_effort),
            seed: pick(&primary.seed, &fallback.seed),
            stop: pick(&primary.stop, &fallback.stop),
            frequency_penalty: pick(&primary.frequency_penalty, &fallback.frequency_penalty),
            presence_penalty: pick(&primary.presence_penalty, &fallback.presence_penalty),
            tool_choice: pick(&primary.tool_choice, &fallback.tool_choice),
            parallel_tool_calls: pick(&primary.parallel_tool_calls, &fallback.parallel_tool_calls),
            response_format: pick(&primary.response_format, &fallback.response_format),
            extra_headers,
            extra_body,
        }
    }

    /// `true` when no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

/// Token usage of one model call, or summed over a call of the agent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens, cached ones included.
    pub input_tokens: u64,
    /// Generated tokens, reasoning ones included.
    pub output_tokens: u64,
    /// Of [`Usage::input_tokens`], those the provider read from its prompt cache
    /// (OpenAI `prompt_tokens_details.cached_tokens`, Anthropic
    /// `cache_read_input_tokens`); 0 when the provider reports none. A
    /// [`ModelPrice::cached_input_per_mtok`](crate::budget::ModelPrice::cached_input_per_mtok)
    /// prices them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cached_input_tokens: u64,
    /// Of [`Usage::output_tokens`], those the model spent reasoning (OpenAI
    /// `completion_tokens_details.reasoning_tokens`); 0 when the provider reports none.
    /// A [`ModelPrice::reasoning_per_mtok`](crate::budget::ModelPrice::reasoning_per_mtok)
    /// prices them.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub reasoning_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// Adds `other` into `self`, field by field, saturating at `u64::MAX` (counts come
    /// from servers, which may report anything).
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
    }

    /// Usage of `input_tokens` prompt and `output_tokens` generated tokens, none of
    /// them cached or reasoning.
    pub const fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            cached_input_tokens: 0,
            reasoning_tokens: 0,
        }
    }
}

/// Why the model stopped generating.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// A natural end of the turn.
    Stop,
    /// The model requested tool calls.
    ToolCalls,
    /// The token limit was reached.
    Length,
    /// The provider filtered the content.
    ContentFilter,
    /// Anything else, verbatim.
    Other(String),
}

/// One streamed piece of a model's answer.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ModelChunk {
    /// A text delta.
    Text(String),
    /// A thinking delta.
    Thinking(String),
    /// A thinking signature (opaque, echoed back to the provider).
    ThinkingSignature(String),
    /// A fragment of a tool call. Fragments with the same `index` belong to one call;
    /// `id` and `name` usually arrive on the first fragment, `arguments` is a piece of
    /// the JSON argument text, concatenated in order.
    ToolCall {
        /// Position of the call within the turn.
        index: usize,
        /// Call id, when this fragment carries it.
        id: Option<String>,
        /// Tool name, when this fragment carries it.
        name: Option<String>,
        /// A piece of the JSON arguments.
        arguments: String,
    },
    /// Token usage (may arrive more than once; the last value per field wins).
    Usage(Usage),
    /// Why generation stopped.
    Finish(FinishReason),
}

/// What went wrong in a model call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelErrorKind {
    /// Credentials were rejected (HTTP 401/403).
    Authentication,
    /// The provider rate-limited the request (HTTP 429).
    RateLimit,
    /// The provider rejected the request (HTTP 400/404/422).
    BadRequest,
    /// The provider failed (HTTP 5xx).
    Server,
    /// The request or the stream timed out (no response headers in time, or no
    /// progress within the idle timeout).
    Timeout,
    /// The model call as a whole passed its total deadline (for the HTTP providers
    /// `HttpConfig::total_timeout`); not retried.
    Deadline,
    /// The stream was malformed or ended before its terminal event.
    Stream,
    /// A scripted model ran out of turns, or a scripted fault.
    Script,
    /// A [`ReplayModel`](replay::ReplayModel) was asked a request that diverges from
    /// its recording, or more requests than it recorded (the source is a
    /// [`ReplayError`](replay::ReplayError)).
    Replay,
    /// Anything else (transport errors, ...).
    Other,
}

/// A model call failure: a kind, a message, and the underlying cause when there is
/// one ([`std::error::Error::source`] returns it as itself, so `downcast_ref` to the
/// cause's type works).
///
/// Equality compares kind and message (a cause is not comparable). Clones share the
/// cause.
#[derive(Clone, Debug)]
pub struct ModelError {
    kind: ModelErrorKind,
    message: String,
    cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl PartialEq for ModelError {
    fn eq(&self, other: &Self) -> bool {
        self.kind == other.kind && self.message == other.message
    }
}

impl Eq for ModelError {}

impl ModelError {
    /// An error of the given kind, without a cause.
    pub fn new(kind: ModelErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            cause: None,
        }
    }

    /// This error with `cause` as its [`source`](std::error::Error::source) (replacing
    /// any earlier cause). Providers attach the transport, decoding or parsing error the
    /// message describes.
    #[must_use]
    pub fn with_source(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(Arc::new(cause));
        self
    }

    /// The error kind.
    pub fn kind(&self) -> ModelErrorKind {
        self.kind
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} error: {}", self.kind, self.message)
    }
}

/// Hand-written rather than `thiserror`: a derived `source` would return the shared
/// `Arc` itself, and `downcast_ref` to the cause's type would fail.
impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}
