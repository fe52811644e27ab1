//! Anthropic messages (feature `anthropic`).

use std::sync::Arc;

use serde_json::{Value, json};

use crate::capabilities::ModelCapabilities;
use crate::capabilities::{drop_sampling, dropped};
use crate::transport::{
    Endpoint, Transport, body_finish, body_start, endpoint_setters, malformed, put,
};
use rein_core::BuildError;
use rein_core::model::{
    GenerateOptions, Messages, Model, ModelError, ModelErrorKind, ModelRequest, ModelStream,
    TokenCount, ToolChoice,
};
use rein_core::{ContentBlock, Msg, Role};

/// The default base URL.
const DEFAULT_BASE: &str = "https://api.anthropic.com";

/// The model `from_env()` uses when `ANTHROPIC_MODEL` is unset.
const DEFAULT_MODEL: &str = "claude-sonnet-4-5";

/// The `anthropic-version` header sent by default.
const DEFAULT_VERSION: &str = "2023-06-01";

/// `max_tokens` when the options do not set it (the API requires the field).
const DEFAULT_MAX_TOKENS: u32 = 4096;

/// A [`Model`] for Anthropic's `POST {base_url}/v1/messages` with streaming. Used
/// exactly like [`ScriptedModel`](rein_core::ScriptedModel).
///
/// ```no_run
/// # fn main() -> Result<(), rein::BuildError> {
/// use rein::model::AnthropicModel;
/// let model = AnthropicModel::builder()
///     .api_key("sk-ant-...")
///     .model("claude-sonnet-4-5")
///     .build()?;
/// let from_env = AnthropicModel::from_env()?; // ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_MODEL
/// # Ok(()) }
/// ```
///
/// # The request
/// - System messages (wherever they stand) are joined with a blank line into the
///   top-level `system` field.
/// - User text, assistant text, thinking blocks *with* their signature (echoed back
///   unchanged; thinking without a signature, e.g. from another provider, is dropped:
///   the API would reject it), `tool_use` blocks (an input that is not a JSON object,
///   i.e. arguments the model garbled, is sent as `{}`: the error result explains),
///   and tool results as `tool_result` blocks in a user turn, with `is_error: true`
///   on failed calls. Consecutive messages of one role are merged into one turn;
///   empty messages are skipped.
/// - `tools`: the request's tool schemas (`name`, `description`, `input_schema`).
/// - [`GenerateOptions`](rein_core::GenerateOptions): `model` (overrides the configured
///   name), `max_tokens` (default 4096, see [`AnthropicModelBuilder::max_tokens`]),
///   `temperature`, `top_p`, `top_k`, `stop` as `stop_sequences`; `tool_choice`
///   (`auto`, `any` for [`ToolChoice::Required`], `tool`, `none`) and
///   `parallel_tool_calls: false` as `disable_parallel_tool_use`, only when tools are
///   offered; `reasoning_effort` enables extended thinking with a budget of 1024
///   (`"minimal"`, `"low"`), 4096 (`"medium"`), 16384 (`"high"`) or the given number
///   of tokens (`"8000"`), none for `"none"`; when thinking is on and `max_tokens` is
///   not set, `max_tokens` is the default plus the budget. `seed`,
///   `frequency_penalty` and `presence_penalty` have no Anthropic equivalent and are
///   not sent. `extra_body` fields are added last and override any of the above;
///   `extra_headers` are sent as HTTP headers. A `response_format` is sent as one
///   more tool of its name with its schema, forced (`tool_choice: tool`) when no other
///   tool is offered and thinking is off; that tool's call comes back as the turn's
///   text (see [`ResponseFormat`](rein_core::model::ResponseFormat)).
/// - [`ModelCapabilities`] (from [`ModelCapabilities::anthropic`] by the effective model
///   name, or [`AnthropicModelBuilder::capabilities`]) and the API's extended-thinking
///   rules decide what is sent: `reasoning_effort` only to models with extended
///   thinking; with thinking on, no `temperature` other than 1, no `top_p` outside
///   0.95..=1 and no `top_k` (each dropped and logged; see
///   [`capabilities`](crate::capabilities) for the rules and why).
///
/// # The stream
/// `message_start` (input tokens, cache reads and writes included), text,
/// `thinking_delta` and `signature_delta`, `tool_use` blocks with their
/// `input_json_delta` fragments (the block index is the tool call's index),
/// `message_delta` (stop reason, output tokens), until `message_stop`; `ping` and
/// unknown event types are ignored (and do not count as progress for
/// [`HttpConfig::idle_timeout`](crate::HttpConfig::idle_timeout)). Token counts
/// are summed with saturation. A body that ends before `message_stop` is a
/// [`ModelErrorKind::Stream`] error.
///
/// # Errors
/// See [`transport`](crate::transport) for timeouts, retries and the typed
/// errors of HTTP failures. An `error` event ends the stream with an error of the kind
/// its type names (`overloaded_error` is a server error, retried when nothing was
/// delivered yet); a payload that is not JSON is a `Stream` error quoting it. An
/// unknown `reasoning_effort` is a [`ModelErrorKind::BadRequest`] before anything is
/// sent, and so is a request extended thinking rules out and that cannot be made valid
/// (see [`request_body`](Self::request_body)).
///
/// # Counting tokens
/// [`Model::count_tokens`] posts the request's `model`, `system`, `messages`, `tools`,
/// `tool_choice` and `thinking` to `{base_url}/v1/messages/count_tokens` (one attempt,
/// the same headers and timeouts) and reads `input_tokens`. The agent asks only near a
/// token or cost budget (see [`rein::budget`](rein_core::budget)); turn it off with
/// [`AnthropicModelBuilder::count_tokens`] for a gateway without the endpoint.
#[derive(Clone, Debug)]
pub struct AnthropicModel {
    model: String,
    max_tokens: u32,
    capabilities: Option<ModelCapabilities>,
    transport: Transport,
    /// Behind an `Arc`: inline it would double the model's size.
    counter: Option<Arc<Transport>>,
}

/// Builds an [`AnthropicModel`]; from [`AnthropicModel::builder`].
#[derive(Clone, Debug, Default)]
#[must_use]
pub struct AnthropicModelBuilder {
    endpoint: Endpoint,
    version: Option<String>,
    max_tokens: Option<u32>,
    capabilities: Option<ModelCapabilities>,
    no_count: bool,
}

impl AnthropicModel {
    /// A builder with no API key, no model and the default base URL
    /// `https://api.anthropic.com`.
    pub fn builder() -> AnthropicModelBuilder {
        AnthropicModelBuilder::default()
    }

    /// A model configured from `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` (default
    /// `https://api.anthropic.com`) and `ANTHROPIC_MODEL` (default
    /// `claude-sonnet-4-5`).
    ///
    /// # Errors
    /// A [`BuildError`] of kind
    /// [`InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) when
    /// `ANTHROPIC_API_KEY` is unset and `ANTHROPIC_BASE_URL` is unset too, or when a
    /// value is invalid (see [`AnthropicModelBuilder::build`]).
    pub fn from_env() -> Result<Self, BuildError> {
        let builder = Self::builder().with_env();
        builder.endpoint.require_key("ANTHROPIC_API_KEY")?;
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
            .unwrap_or_else(|| ModelCapabilities::anthropic(name))
    }

    /// The JSON body this model sends for `request` (what [`Model::stream`] posts),
    /// after the [capability rules](crate::capabilities).
    ///
    /// # Errors
    /// [`ModelErrorKind::BadRequest`], naming the option, for a `reasoning_effort` that
    /// is neither a known level nor a number of tokens, and with extended thinking on: a
    /// budget under 1,024 tokens (`reasoning_effort`), an explicit `max_tokens` not above
    /// the budget, or a `tool_choice` that forces tool use while tools are offered.
    pub fn request_body(&self, request: &ModelRequest) -> Result<Value, ModelError> {
        let name = request.options.model.as_deref().unwrap_or(&self.model);
        let caps = self.capabilities_for(name);
        let (options, budget) =
            applicable(&request.options, name, caps, !request.tools.is_empty())?;
        let o = &options;
        let mut body = body_start(o, &self.model);
        let (system, turns) = messages(&request.messages);
        if !system.is_empty() {
            body.insert("system".into(), system.into());
        }
        body.insert("messages".into(), turns.into());
        let max_tokens = o
            .max_tokens
            .unwrap_or_else(|| self.max_tokens.saturating_add(budget.unwrap_or(0)));
        body.insert("max_tokens".into(), max_tokens.into());
        if let Some(budget) = budget {
            body.insert(
                "thinking".into(),
                json!({"type": "enabled", "budget_tokens": budget}),
            );
        }
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| {
                json!({"name": t.name, "description": t.description, "input_schema": t.parameters})
            })
            .collect();
        let mut choice = tool_choice(o.tool_choice.as_ref(), o.parallel_tool_calls);
        if let Some(f) = &o.response_format {
            if request.tools.iter().any(|t| t.name == f.name) {
                return Err(ModelError::new(
                    ModelErrorKind::BadRequest,
                    format!(
                        "response format `{}` has the name of a tool; Anthropic receives the \
                     format as a tool of that name: rename the format",
                        f.name
                    ),
                ));
            }
            tools.push(json!({
                "name": f.name,
                "description": OUTPUT_TOOL_DESCRIPTION,
                "input_schema": f.schema,
            }));
            // Forced only where nothing else could be called and the API allows it.
            if request.tools.is_empty() && budget.is_none() && choice.is_none() {
                choice = Some(json!({"type": "tool", "name": f.name}));
            }
        }
        if !tools.is_empty() {
            body.insert("tools".into(), tools.into());
            put(&mut body, "tool_choice", choice);
        }
        put(&mut body, "temperature", o.temperature);
        put(&mut body, "top_p", o.top_p);
        put(&mut body, "top_k", o.top_k);
        put(&mut body, "stop_sequences", o.stop.clone());
        Ok(body_finish(body, o))
    }
}

impl AnthropicModelBuilder {
    endpoint_setters!("https://api.anthropic.com");

    /// Fills what is still unset from `ANTHROPIC_API_KEY`, `ANTHROPIC_BASE_URL` and
    /// `ANTHROPIC_MODEL` (default `claude-sonnet-4-5`). Unlike
    /// [`AnthropicModel::from_env`], a missing key is not an error.
    pub fn with_env(mut self) -> Self {
        self.endpoint.fill_from_env(
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "ANTHROPIC_MODEL",
            DEFAULT_MODEL,
        );
        self
    }

    /// Sets the `anthropic-version` header (default `2023-06-01`).
    pub fn version(mut self, version: impl Into<String>) -> Self {
        self.version = Some(version.into());
        self
    }

    /// Sets the `max_tokens` sent when the options leave it unset (default 4096; the
    /// API requires the field).
    pub fn max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = Some(max_tokens);
        self
    }

    /// Sets the model's capabilities for every call, replacing the lookup of
    /// [`ModelCapabilities::anthropic`] by name. The extended-thinking rules of the API
    /// apply whatever the capabilities say.
    pub fn capabilities(mut self, capabilities: ModelCapabilities) -> Self {
        self.capabilities = Some(capabilities);
        self
    }

    /// Whether [`Model::count_tokens`] asks the API's `messages/count_tokens` endpoint
    /// (default `true`); `false` for a gateway that does not offer it (the agent then
    /// decides on its estimate).
    pub fn count_tokens(mut self, yes: bool) -> Self {
        self.no_count = !yes;
        self
    }

    /// Builds the model. Without an API key no `x-api-key` header is sent (for
    /// gateways that authenticate otherwise; see
    /// [`header`](AnthropicModelBuilder::header)).
    ///
    /// # Errors
    /// A [`BuildError`] of kind
    /// [`InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) without a model name,
    /// for a base URL that is not http(s), an invalid header, or when the HTTP client
    /// cannot be created.
    pub fn build(self) -> Result<AnthropicModel, BuildError> {
        let model = self.endpoint.model_name()?;
        let version = self.version.as_deref().unwrap_or(DEFAULT_VERSION);
        let mut headers = vec![("anthropic-version".to_owned(), version.to_owned())];
        if let Some(key) = &self.endpoint.api_key {
            headers.push(("x-api-key".to_owned(), key.clone()));
        }
        headers.extend(self.endpoint.headers.iter().cloned());
        let base = self.endpoint.base_url.as_deref().unwrap_or(DEFAULT_BASE);
        let transport = Transport::new(base, "v1/messages", &headers, &self.endpoint.http)?;
        let counter = if self.no_count {
            None
        } else {
            Some(Arc::new(
                transport.at(&format!("{}/count_tokens", transport.url()))?,
            ))
        };
        Ok(AnthropicModel {
            model,
            max_tokens: self.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            capabilities: self.capabilities,
            transport,
            counter,
        })
    }
}

impl Model for AnthropicModel {
    fn name(&self) -> &str {
        &self.model
    }

    fn provider(&self) -> &str {
        "anthropic"
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
            AnthropicDecoder::for_request(&request),
        )
    }

    /// `input_tokens` from `messages/count_tokens` (see [the type's docs](AnthropicModel)).
    fn count_tokens(&self, request: &ModelRequest) -> Option<TokenCount> {
        let counter = self.counter.as_ref()?;
        let body = self.request_body(request).map(|body| {
            let keep = [
                "model",
                "system",
                "messages",
                "tools",
                "tool_choice",
                "thinking",
            ];
            let fields = body.as_object().into_iter().flatten();
            Value::Object(
                fields
                    .filter(|(k, _)| keep.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            )
        });
        let answer = body.map(|b| counter.post_json(&b, &request.options.extra_headers));
        Some(Box::pin(async move {
            let answer = answer?.await?;
            match answer.get("input_tokens").and_then(Value::as_u64) {
                Some(n) => Ok(n),
                None => Err(malformed("count_tokens answer", &answer.to_string())),
            }
        }))
    }
}

/// The description of the tool that carries a [`ResponseFormat`](super::ResponseFormat)
/// on this wire.
const OUTPUT_TOOL_DESCRIPTION: &str = "Give your final answer by calling this tool: its input \
     is the answer. Call it once, after any other tools you need.";

/// The smallest thinking budget the API accepts.
const MIN_THINKING_BUDGET: u32 = 1024;

/// The options with what `caps` and the extended-thinking rules rule out dropped (and
/// logged), and the thinking budget; or the option that cannot be made valid.
fn applicable(
    options: &GenerateOptions,
    name: &str,
    caps: ModelCapabilities,
    tools: bool,
) -> Result<(GenerateOptions, Option<u32>), ModelError> {
    let bad = |m: String| ModelError::new(ModelErrorKind::BadRequest, m);
    let mut o = options.clone();
    let budget = match o.reasoning_effort.as_deref() {
        None => None,
        Some(effort) => thinking_budget(effort)?,
    };
    if !caps.sampling {
        drop_sampling(
            &mut o,
            name,
            "the model takes no sampling parameters",
            false,
        );
    }
    let Some(budget) = budget else {
        return Ok((o, None));
    };
    if !caps.reasoning {
        o.reasoning_effort = None;
        dropped(
            name,
            "reasoning_effort",
            "the model has no extended thinking",
        );
        return Ok((o, None));
    }
    if budget < MIN_THINKING_BUDGET {
        return Err(bad(format!(
            "reasoning_effort `{}` asks for a thinking budget of {budget} tokens; Anthropic \
             requires at least {MIN_THINKING_BUDGET}",
            options.reasoning_effort.as_deref().unwrap_or_default()
        )));
    }
    if let Some(max) = o.max_tokens
        && max <= budget
    {
        return Err(bad(format!(
            "max_tokens {max} must be greater than the thinking budget of {budget} tokens \
             (reasoning_effort `{}`)",
            options.reasoning_effort.as_deref().unwrap_or_default()
        )));
    }
    if tools
        && matches!(
            o.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Tool(_))
        )
    {
        return Err(bad(
            "tool_choice forces tool use, which Anthropic does not allow with extended \
             thinking (reasoning_effort): use tool_choice auto or none, or no reasoning_effort"
                .to_owned(),
        ));
    }
    let why = "extended thinking is on (reasoning_effort)";
    if o.temperature.take_if(|t| *t != 1.0).is_some() {
        dropped(
            name,
            "temperature",
            &format!("{why}, which requires temperature 1"),
        );
    }
    if o.top_p.take_if(|p| !(0.95..=1.0).contains(p)).is_some() {
        dropped(
            name,
            "top_p",
            &format!("{why}, which requires top_p within 0.95..=1"),
        );
    }
    if o.top_k.take().is_some() {
        dropped(name, "top_k", &format!("{why}, which does not allow top_k"));
    }
    Ok((o, Some(budget)))
}

/// The thinking budget for a `reasoning_effort` value (`None` for `"none"`).
fn thinking_budget(effort: &str) -> Result<Option<u32>, ModelError> {
    Ok(Some(match effort.trim().to_ascii_lowercase().as_str() {
        "none" => return Ok(None),
        "minimal" | "low" => 1024,
        "medium" => 4096,
        "high" => 16384,
        other => other.parse().map_err(|_| {
            ModelError::new(
                ModelErrorKind::BadRequest,
                format!(
                    "unknown reasoning_effort `{effort}` for Anthropic: use none, minimal, low, \
                     medium, high or a number of thinking tokens"
                ),
            )
        })?,
    }))
}

fn tool_choice(choice: Option<&ToolChoice>, parallel: Option<bool>) -> Option<Value> {
    let mut v = match choice {
        None if parallel == Some(false) => json!({"type": "auto"}),
        None => return None,
        Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::None) => json!({"type": "none"}),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Tool(name)) => json!({"type": "tool", "name": name}),
        // A choice this version does not know: the API's default.
        Some(_) => json!({"type": "auto"}),
    };
    if parallel == Some(false)
        && let Some(obj) = v.as_object_mut()
        && obj.get("type").and_then(Value::as_str) != Some("none")
    {
        obj.insert("disable_parallel_tool_use".into(), true.into());
    }
    Some(v)
}

/// The system text and the wire turns for `msgs`.
fn messages(msgs: &Messages) -> (String, Vec<Value>) {
    let mut system: Vec<String> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in msgs {
        let (role, blocks) = match m.role {
            Role::System => {
                system.push(m.text());
                continue;
            }
            Role::Assistant => ("assistant", assistant_blocks(m)),
            Role::User | Role::Tool => ("user", user_blocks(m)),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, b)) if *last == role => b.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let turns = turns
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    (system.join("\n\n"), turns)
}

fn assistant_blocks(m: &Msg) -> Vec<Value> {
    m.content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Thinking(t) => t
                .signature
                .as_ref()
                .map(|sig| json!({"type": "thinking", "thinking": t.text, "signature": sig})),
            ContentBlock::Text(t) if !t.is_empty() => Some(json!({"type": "text", "text": t})),
            ContentBlock::ToolUse(u) => {
                let input = if u.input.is_object() {
                    u.input.clone()
                } else {
                    json!({})
                };
                Some(json!({"type": "tool_use", "id": u.id, "name": u.name, "input": input}))
            }
            _ => None,
        })
        .collect()
}

/// Tool results first (the API wants them at the start of the turn), then text.
fn user_blocks(m: &Msg) -> Vec<Value> {
    let results = m.tool_results().into_iter().map(|r| {
        let mut b = json!({"type": "tool_result", "tool_use_id": r.id, "content": r.content});
        if r.is_error
            && let Some(obj) = b.as_object_mut()
        {
            obj.insert("is_error".into(), true.into());
        }
        b
    });
    let texts = m.content.iter().filter_map(|b| match b {
        ContentBlock::Text(t) if !t.is_empty() => Some(json!({"type": "text", "text": t})),
        _ => None,
    });
    results.chain(texts).collect()
}

mod decode;

pub(crate) use decode::AnthropicDecoder;
