//! OpenAI-compatible chat completions (feature `openai`).

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::capabilities::ModelCapabilities;
use crate::capabilities::{OPENAI_EFFORTS, drop_sampling, dropped};
use crate::sse::Event;
use crate::transport::{
    Decoder, Endpoint, Flow, Transport, body_finish, body_start, endpoint_setters, malformed,
    parse_json, put, str_field, stream_error, u64_field,
};
use crate::typed::{self, nonempty};
use rein_core::BuildError;
use rein_core::model::{
    FinishReason, GenerateOptions, Messages, Model, ModelChunk, ModelError, ModelErrorKind,
    ModelRequest, ModelStream, TokenCount, ToolChoice, Usage,
};
use rein_core::{ContentBlock, Role, ToolResult};

/// The default base URL.
const DEFAULT_BASE: &str = "https://api.openai.com/v1";

/// The model `from_env()` uses when `OPENAI_MODEL` is unset.
const DEFAULT_MODEL: &str = "gpt-4o-mini";

/// A [`Model`] for `POST {base_url}/chat/completions` with streaming: OpenAI itself or
/// any OpenAI-compatible server (vLLM, Ollama, llama.cpp server, DeepSeek, DashScope
/// compatible mode, ...). Used exactly like [`ScriptedModel`](rein_core::ScriptedModel).
///
/// ```no_run
/// # fn main() -> Result<(), rein::BuildError> {
/// use rein::model::OpenAiChatModel;
/// let model = OpenAiChatModel::builder()
///     .base_url("http://localhost:11434/v1") // e.g. Ollama
///     .model("qwen3:8b")
///     .build()?;
/// let from_env = OpenAiChatModel::from_env()?; // OPENAI_API_KEY, OPENAI_BASE_URL, OPENAI_MODEL
/// # Ok(()) }
/// ```
///
/// # The request
/// - `messages`: system and user messages as text; assistant messages with their text
///   (`null` when they only call tools) and `tool_calls` (arguments as JSON text; the
///   raw text when the model produced invalid JSON); one `tool` message per
///   [`ToolResult`] with its `tool_call_id`. Thinking is not sent back, and
///   `ToolResult::is_error` has no field on this wire (the result text says it).
/// - `tools`: the request's tool schemas as `function` tools.
/// - `stream: true` and `stream_options.include_usage: true`.
/// - [`GenerateOptions`](rein_core::GenerateOptions): `model` (overrides the configured
///   name), `temperature`, `top_p`, `top_k` (not an OpenAI parameter; sent for servers
///   that accept it), `max_tokens` (or `max_completion_tokens`, see
///   [`OpenAiChatModelBuilder::max_completion_tokens`]), `seed`, `stop`,
///   `frequency_penalty`, `presence_penalty`, `reasoning_effort`; `tool_choice` and
///   `parallel_tool_calls` only when tools are offered (OpenAI rejects them
///   otherwise); `response_format` as `{"type": "json_schema", "json_schema": {name,
///   schema, strict}}`. `extra_body` fields are added last and override any of the above;
///   `extra_headers` are sent as HTTP headers.
/// - [`ModelCapabilities`] (from [`ModelCapabilities::openai`] by the effective model
///   name, or [`OpenAiChatModelBuilder::capabilities`]) decide what a model is sent:
///   `reasoning_effort` only to reasoning models, no sampling parameters to OpenAI's
///   reasoning models, which receive `max_tokens` as `max_completion_tokens`; dropped
///   options are logged (see [`capabilities`](crate::capabilities) for the rules
///   and why).
///
/// # The stream
/// Text deltas (a `refusal` counts as text), reasoning deltas (`reasoning_content` or `reasoning`, as vLLM,
/// DeepSeek, Ollama and OpenRouter send them) as [`ModelChunk::Thinking`], tool-call
/// fragments by their `index`, usage (`prompt_tokens`/`completion_tokens`), the finish
/// reason, until `data: [DONE]`. A body that ends after a finish reason but without
/// `[DONE]` is accepted (some compatible servers omit it); one that ends earlier is a
/// [`ModelErrorKind::Stream`](rein_core::ModelErrorKind::Stream) error. A chunk with no
/// content, tool call, usage or finish reason (an empty delta) yields nothing and does
/// not count as progress for
/// [`HttpConfig::idle_timeout`](crate::HttpConfig::idle_timeout).
///
/// # Errors
/// See [`transport`](crate::transport) for timeouts, retries and the typed
/// errors of HTTP failures. An `error` object inside the stream ends it with an error
/// of the kind its `type`/`code` names; a payload that is not JSON is a `Stream` error
/// quoting it. A request the capabilities rule out and that cannot be made valid (a
/// `reasoning_effort` level a known OpenAI reasoning model does not have) is a
/// [`ModelErrorKind::BadRequest`](rein_core::ModelErrorKind::BadRequest) naming the option,
/// before anything is sent.
///
/// # Counting tokens
/// OpenAI's chat completions have no counting endpoint, so [`Model::count_tokens`] is
/// `None` unless the builder is told where a llama.cpp server counts
/// ([`OpenAiChatModelBuilder::llama_server_token_count`]): the request body goes to its
/// `POST /apply-template` (the prompt its chat template makes, tools included), the
/// prompt to `POST /tokenize`, and the count is the tokens it returns — the
/// `prompt_tokens` the server then reports for the request.
#[derive(Clone, Debug)]
pub struct OpenAiChatModel {
    model: String,
    max_completion_tokens: bool,
    capabilities: Option<ModelCapabilities>,
    transport: Transport,
    /// Behind an `Arc`: rarely configured, and it would double the model's size inline.
    counter: Option<Arc<LlamaCounter>>,
}

/// A llama.cpp server's endpoints that count a request's prompt tokens.
#[derive(Clone, Debug)]
struct LlamaCounter {
    template: Transport,
    tokenize: Transport,
}

/// Builds an [`OpenAiChatModel`]; from [`OpenAiChatModel::builder`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct OpenAiChatModelBuilder {
    endpoint: Endpoint,
    max_completion_tokens: bool,
    capabilities: Option<ModelCapabilities>,
    llama_server: Option<String>,
}

impl OpenAiChatModel {
    /// A builder with no API key, no model and the default base URL
    /// `https://api.openai.com/v1`.
    pub fn builder() -> OpenAiChatModelBuilder {
        OpenAiChatModelBuilder::default()
    }

    /// A model configured from `OPENAI_API_KEY`, `OPENAI_BASE_URL` (default
    /// `https://api.openai.com/v1`) and `OPENAI_MODEL` (default `gpt-4o-mini`).
    ///
    /// # Errors
    /// A [`BuildError`] of kind
    /// [`InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) when `OPENAI_API_KEY` is
    /// unset and `OPENAI_BASE_URL` is unset too (a local server may need no key), or
    /// when a value is invalid (see [`OpenAiChatModelBuilder::build`]).
    pub fn from_env() -> Result<Self, BuildError> {
        let builder = Self::builder().with_env();
        builder.endpoint.require_key("OPENAI_API_KEY")?;
        builder.build()
    }

    /// The endpoint URL requests go to.
    pub fn url(&self) -> &str {
        self.transport.url()
    }

    /// The capabilities that apply to a call of model `name` (the builder's, else the
    /// table's).
    pub fn capabilities_for(&self, name: &str) -> ModelCapabilities {
        self.capabilities
            .unwrap_or_else(|| ModelCapabilities::openai(name))
    }

    /// The JSON body this model sends for `request` (what [`Model::stream`] posts),
    /// after the [capability rules](crate::capabilities).
    ///
    /// # Errors
    /// [`ModelErrorKind::BadRequest`] naming `reasoning_effort` when a known OpenAI
    /// reasoning model is asked for a level it does not have.
    pub fn request_body(&self, request: &ModelRequest) -> Result<Value, ModelError> {
        let name = request.options.model.as_deref().unwrap_or(&self.model);
        let caps = self.capabilities_for(name);
        let options = applicable(&request.options, name, caps)?;
        let o = &options;
        let mut body = body_start(o, &self.model);
        body.insert("messages".into(), messages(&request.messages).into());
        body.insert("stream_options".into(), json!({"include_usage": true}));
        if !request.tools.is_empty() {
            let tools: Vec<Value> = request
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            body.insert("tools".into(), tools.into());
            put(
                &mut body,
                "tool_choice",
                o.tool_choice.as_ref().map(tool_choice),
            );
            put(&mut body, "parallel_tool_calls", o.parallel_tool_calls);
        }
        if let Some(f) = &o.response_format {
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": {
                    "name": f.name, "schema": f.schema, "strict": f.strict}}),
            );
        }
        put(&mut body, "temperature", o.temperature);
        put(&mut body, "top_p", o.top_p);
        put(&mut body, "top_k", o.top_k);
        let max_key = if self.max_completion_tokens || caps.max_completion_tokens {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        put(&mut body, max_key, o.max_tokens);
        put(&mut body, "seed", o.seed);
        put(&mut body, "stop", o.stop.clone());
        put(&mut body, "frequency_penalty", o.frequency_penalty);
        put(&mut body, "presence_penalty", o.presence_penalty);
        put(&mut body, "reasoning_effort", o.reasoning_effort.clone());
        Ok(body_finish(body, o))
    }
}

/// The options with what `caps` rules out dropped (and logged), or the option that
/// cannot be made valid.
fn applicable(
    options: &GenerateOptions,
    name: &str,
    caps: ModelCapabilities,
) -> Result<GenerateOptions, ModelError> {
    let mut o = options.clone();
    if !caps.reasoning && o.reasoning_effort.take().is_some() {
        dropped(name, "reasoning_effort", "the model does not reason");
    }
    if !caps.sampling {
        drop_sampling(
            &mut o,
            name,
            "a reasoning model takes no sampling parameters",
            true,
        );
    }
    if caps.known
        && caps.reasoning
        && let Some(effort) = &o.reasoning_effort
        && !OPENAI_EFFORTS.contains(&effort.trim().to_ascii_lowercase().as_str())
    {
        return Err(ModelError::new(
            ModelErrorKind::BadRequest,
            format!(
                "reasoning_effort `{effort}` is not a level of `{name}`: use one of {}",
                OPENAI_EFFORTS.join(", ")
            ),
        ));
    }
    Ok(o)
}

impl OpenAiChatModelBuilder {
    endpoint_setters!("https://api.openai.com/v1");

    /// Fills what is still unset from `OPENAI_API_KEY`, `OPENAI_BASE_URL` and
    /// `OPENAI_MODEL` (default `gpt-4o-mini`). Unlike
    /// [`OpenAiChatModel::from_env`], a missing key is not an error.
    pub fn with_env(mut self) -> Self {
        self.endpoint.fill_from_env(
            "OPENAI_API_KEY",
            "OPENAI_BASE_URL",
            "OPENAI_MODEL",
            DEFAULT_MODEL,
        );
        self
    }

    /// Sends `GenerateOptions::max_tokens` as `max_completion_tokens` (what OpenAI's
    /// reasoning models require) instead of `max_tokens` (the default, which most
    /// compatible servers understand).
    pub fn max_completion_tokens(mut self, yes: bool) -> Self {
        self.max_completion_tokens = yes;
        self
    }

    /// Sets the model's capabilities for every call, replacing the lookup of
    /// [`ModelCapabilities::openai`] by name (e.g. to declare a local reasoning model,
    /// or [`ModelCapabilities::PERMISSIVE`] to send every option as given).
    pub fn capabilities(mut self, capabilities: ModelCapabilities) -> Self {
        self.capabilities = Some(capabilities);
        self
    }

    /// Counts prompt tokens on the llama.cpp server at `url` — its root, e.g.
    /// `http://127.0.0.1:8080`, not the `/v1` base URL (see [counting
    /// tokens](OpenAiChatModel#counting-tokens)). Default: no counting.
    pub fn llama_server_token_count(mut self, url: impl Into<String>) -> Self {
        self.llama_server = Some(url.into());
        self
    }

    /// Builds the model. Without an API key no `Authorization` header is sent.
    ///
    /// # Errors
    /// A [`BuildError`] of kind
    /// [`InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) without a model name,
    /// for a base URL that is not http(s), an invalid header, or when the HTTP client
    /// cannot be created.
    pub fn build(self) -> Result<OpenAiChatModel, BuildError> {
        let model = self.endpoint.model_name()?;
        let mut headers = Vec::new();
        if let Some(key) = &self.endpoint.api_key {
            headers.push(("authorization".to_owned(), format!("Bearer {key}")));
        }
        headers.extend(self.endpoint.headers.iter().cloned());
        let base = self.endpoint.base_url.as_deref().unwrap_or(DEFAULT_BASE);
        let transport = Transport::new(base, "chat/completions", &headers, &self.endpoint.http)?;
        let counter = match &self.llama_server {
            None => None,
            Some(root) => {
                let root = root.trim_end_matches('/');
                Some(Arc::new(LlamaCounter {
                    template: transport.at(&format!("{root}/apply-template"))?,
                    tokenize: transport.at(&format!("{root}/tokenize"))?,
                }))
            }
        };
        Ok(OpenAiChatModel {
            model,
            max_completion_tokens: self.max_completion_tokens,
            capabilities: self.capabilities,
            transport,
            counter,
        })
    }
}

impl Model for OpenAiChatModel {
    fn name(&self) -> &str {
        &self.model
    }

    fn provider(&self) -> &str {
        "openai"
    }

    /// The capabilities of the configured model ([`capabilities_for`](Self::capabilities_for)
    /// its name).
    fn capabilities(&self) -> ModelCapabilities {
        self.capabilities_for(&self.model)
    }

    fn stream(&self, request: ModelRequest) -> ModelStream {
        self.transport.stream(
            self.request_body(&request),
            &request.options.extra_headers,
            OpenAiDecoder::default(),
        )
    }

    /// The llama.cpp server's count, where one is configured (see [counting
    /// tokens](OpenAiChatModel#counting-tokens)).
    fn count_tokens(&self, request: &ModelRequest) -> Option<TokenCount> {
        let counter = self.counter.clone()?;
        let headers = request.options.extra_headers.clone();
        let templated = self
            .request_body(request)
            .map(|body| counter.template.post_json(&body, &headers));
        Some(Box::pin(async move {
            let answer = templated?.await?;
            let Some(prompt) = answer.get("prompt").and_then(Value::as_str) else {
                return Err(malformed("apply-template answer", &answer.to_string()));
            };
            let body = json!({"content": prompt, "add_special": true});
            let answer = counter.tokenize.post_json(&body, &headers).await?;
            match answer.get("tokens").and_then(Value::as_array) {
                Some(tokens) => Ok(tokens.len() as u64),
                None => Err(malformed("tokenize answer", &answer.to_string())),
            }
        }))
    }
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => "auto".into(),
        ToolChoice::None => "none".into(),
        ToolChoice::Required => "required".into(),
        ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
        // A choice this version does not know: the API's default.
        _ => "auto".into(),
    }
}

/// The wire messages for `msgs`.
fn messages(msgs: &Messages) -> Vec<Value> {
    let mut out = Vec::with_capacity(msgs.len());
    for m in msgs {
        let text = m.text();
        match m.role {
            Role::System => out.push(json!({"role": "system", "content": text})),
            Role::User => {
                out.extend(m.tool_results().into_iter().map(tool_message));
                if !text.is_empty() || m.tool_results().is_empty() {
                    out.push(json!({"role": "user", "content": text}));
                }
            }
            Role::Assistant => {
                let calls: Vec<Value> = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        ContentBlock::ToolUse(u) => Some(json!({
                            "id": u.id, "type": "function",
                            "function": {"name": u.name, "arguments": arguments_text(&u.input)}})),
                        _ => None,
                    })
                    .collect();
                let mut msg = Map::new();
                msg.insert("role".into(), "assistant".into());
                if calls.is_empty() {
                    msg.insert("content".into(), text.into());
                } else {
                    let content = if text.is_empty() {
                        Value::Null
                    } else {
                        text.into()
                    };
                    msg.insert("content".into(), content);
                    msg.insert("tool_calls".into(), calls.into());
                }
                out.push(Value::Object(msg));
            }
            Role::Tool => out.extend(m.tool_results().into_iter().map(tool_message)),
        }
    }
    out
}

fn tool_message(r: &ToolResult) -> Value {
    json!({"role": "tool", "tool_call_id": r.id, "content": r.content})
}

/// Tool-call arguments as the JSON text the model produced.
fn arguments_text(input: &Value) -> String {
    match input {
        // Arguments that were not valid JSON are kept as the raw text.
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    }
}

/// Decodes `chat.completion.chunk` events.
#[derive(Clone, Debug, Default)]
pub(crate) struct OpenAiDecoder {
    /// A finish reason was seen.
    finished: bool,
    /// Call ids seen in fragments without an `index`, in order (their index).
    ids: Vec<String>,
}

impl OpenAiDecoder {
    /// The index of a tool-call fragment: its `index`, or (for servers that omit it)
    /// the position of its id among the ids seen, or the last call's.
    fn call_index(&mut self, call: &Value) -> usize {
        self.index_of(
            call.get("index").and_then(Value::as_u64),
            str_field(call, "id"),
        )
    }

    /// [`call_index`](Self::call_index) of a fragment with this `index` and `id`.
    fn index_of(&mut self, index: Option<u64>, id: Option<&str>) -> usize {
        if let Some(i) = index {
            return usize::try_from(i).unwrap_or(usize::MAX);
        }
        match id {
            Some(id) => match self.ids.iter().position(|x| x == id) {
                Some(p) => p,
                None => {
                    self.ids.push(id.to_owned());
                    self.ids.len() - 1
                }
            },
            None => self.ids.len().saturating_sub(1),
        }
    }
}

impl Decoder for OpenAiDecoder {
    fn decode(
        &mut self,
        event: &Event,
        out: &mut VecDeque<ModelChunk>,
    ) -> Result<Flow, ModelError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        if let Some(chunk) = typed::view::<typed::OpenAiChunk<'_>>(data) {
            return self.decode_view(chunk, out);
        }
        let v = parse_json(data)?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            return Err(stream_error(err));
        }
        let choices = match v.get("choices") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(c)) => c.as_slice(),
            Some(_) => return Err(malformed("`choices` is not an array", data)),
        };
        for choice in choices.iter().filter(|c| u64_field(c, "index") == 0) {
            let delta = choice.get("delta").unwrap_or(&Value::Null);
            if let Some(t) =
                str_field(delta, "reasoning_content").or_else(|| str_field(delta, "reasoning"))
            {
                out.push_back(ModelChunk::Thinking(t.to_owned()));
            }
            if let Some(t) = str_field(delta, "content").or_else(|| str_field(delta, "refusal")) {
                out.push_back(ModelChunk::Text(t.to_owned()));
            }
            if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
                for call in calls {
                    let index = self.call_index(call);
                    let f = call.get("function").unwrap_or(&Value::Null);
                    out.push_back(ModelChunk::ToolCall {
                        index,
                        id: str_field(call, "id").map(str::to_owned),
                        name: str_field(f, "name").map(str::to_owned),
                        arguments: f
                            .get("arguments")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                    });
                }
            }
            if let Some(reason) = str_field(choice, "finish_reason") {
                self.finished = true;
                out.push_back(ModelChunk::Finish(finish_reason(reason)));
            }
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let mut usage = Usage::new(
                u64_field(u, "prompt_tokens"),
                u64_field(u, "completion_tokens"),
            );
            if let Some(d) = u.get("prompt_tokens_details") {
                usage.cached_input_tokens = u64_field(d, "cached_tokens");
            }
            if let Some(d) = u.get("completion_tokens_details") {
                usage.reasoning_tokens = u64_field(d, "reasoning_tokens");
            }
            out.push_back(ModelChunk::Usage(usage));
        }
        Ok(Flow::More)
    }

    fn complete_without_terminal(&self) -> bool {
        self.finished
    }
}

impl OpenAiDecoder {
    /// What [`decode`](Decoder::decode) makes of a chunk that fits the typed view (the
    /// same chunks, read without building a `Value`).
    fn decode_view(
        &mut self,
        chunk: typed::OpenAiChunk<'_>,
        out: &mut VecDeque<ModelChunk>,
    ) -> Result<Flow, ModelError> {
        if let Some(err) = &chunk.error {
            return Err(stream_error(err));
        }
        let choices = chunk.choices.iter().flatten().map(|c| &c.0);
        for choice in choices.filter(|c| c.index.unwrap_or(0) == 0) {
            if let Some(typed::Obj(delta)) = &choice.delta {
                if let Some(t) = nonempty(&delta.reasoning_content).or(nonempty(&delta.reasoning)) {
                    out.push_back(ModelChunk::Thinking(t.to_owned()));
                }
                if let Some(t) = nonempty(&delta.content).or(nonempty(&delta.refusal)) {
                    out.push_back(ModelChunk::Text(t.to_owned()));
                }
                for typed::Obj(call) in delta.tool_calls.iter().flatten() {
                    let id = nonempty(&call.id);
                    let f = call.function.as_ref().map(|f| &f.0);
                    out.push_back(ModelChunk::ToolCall {
                        index: self.index_of(call.index, id),
                        id: id.map(str::to_owned),
                        name: f.and_then(|f| nonempty(&f.name)).map(str::to_owned),
                        arguments: f
                            .and_then(|f| f.arguments.as_deref())
                            .unwrap_or("")
                            .to_owned(),
                    });
                }
            }
            if let Some(reason) = nonempty(&choice.finish_reason) {
                self.finished = true;
                out.push_back(ModelChunk::Finish(finish_reason(reason)));
            }
        }
        if let Some(typed::Obj(u)) = &chunk.usage {
            let mut usage = Usage::new(
                u.prompt_tokens.unwrap_or(0),
                u.completion_tokens.unwrap_or(0),
            );
            if let Some(typed::Obj(d)) = &u.prompt_tokens_details {
                usage.cached_input_tokens = d.cached_tokens.unwrap_or(0);
            }
            if let Some(typed::Obj(d)) = &u.completion_tokens_details {
                usage.reasoning_tokens = d.reasoning_tokens.unwrap_or(0);
            }
            out.push_back(ModelChunk::Usage(usage));
        }
        Ok(Flow::More)
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "length" => FinishReason::Length,
        "content_filter" => FinishReason::ContentFilter,
        other => FinishReason::Other(other.to_owned()),
    }
}
