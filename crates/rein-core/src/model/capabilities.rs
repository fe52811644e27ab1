//! What a model accepts: the options a provider may send it, and the structured-output
//! and tool combinations the agent loop may ask of it.
//!
//! A [`Model`](super::Model) reports its capabilities through
//! [`Model::capabilities`](super::Model::capabilities) (the default is
//! [`ModelCapabilities::PERMISSIVE`]). The HTTP providers look them up by model name in
//! a small table ([`ModelCapabilities::openai`], [`ModelCapabilities::anthropic`]) unless
//! their builder was given some (`capabilities(..)`); the presets
//! [`llama_cpp`](ModelCapabilities::llama_cpp), [`ollama`](ModelCapabilities::ollama) and
//! [`vllm`](ModelCapabilities::vllm) describe the local servers. The providers' rules
//! (which options are dropped or refused, and why) are documented with the providers.
//!
//! The agent reads two groups of fields: [`tools`](ModelCapabilities::tools),
//! [`native_output`](ModelCapabilities::native_output) and
//! [`native_output_with_tools`](ModelCapabilities::native_output_with_tools) choose how a
//! structured-output call asks for its answer ([`OutputMode::Auto`](crate::agent::OutputMode::Auto)).

/// What one model accepts (see the [module docs](self) for how each field is used).
///
/// Build one from [`PERMISSIVE`](Self::PERMISSIVE) or a table lookup and adjust it with
/// the setters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ModelCapabilities {
    /// The model reasons and accepts a reasoning effort (OpenAI `reasoning_effort`,
    /// Anthropic extended thinking). When `false`, `reasoning_effort` is dropped.
    pub reasoning: bool,
    /// The model accepts sampling parameters (`temperature`, `top_p`, `top_k`,
    /// `frequency_penalty`, `presence_penalty`). When `false`, they are dropped.
    pub sampling: bool,
    /// The model takes the token limit as `max_completion_tokens` (OpenAI reasoning
    /// models) instead of `max_tokens`.
    pub max_completion_tokens: bool,
    /// The model is one of the provider's own, whose option values are checked (a
    /// `reasoning_effort` level an OpenAI reasoning model does not know is refused).
    /// `false` for unknown names: compatible servers have values of their own.
    pub known: bool,
    /// The server calls tools (function calling). When `false`, a structured-output
    /// call of an agent never uses the final-answer tool
    /// ([`OutputMode::Tool`](crate::agent::OutputMode::Tool)).
    pub tools: bool,
    /// The server accepts a native response format (`response_format: json_schema`, or
    /// the provider's equivalent) on a request that offers no tools.
    pub native_output: bool,
    /// The server accepts a native response format *together with* tools on one
    /// request. `false` unless declared: this is the one field where
    /// [`PERMISSIVE`](Self::PERMISSIVE) is not "send as given", because llama.cpp's
    /// server aborts on that combination once a tool result is in the conversation,
    /// and a structured-output call of an agent with tools then uses the final-answer
    /// tool instead (see [`OutputMode`](crate::agent::OutputMode)).
    pub native_output_with_tools: bool,
    /// The model's context window in tokens (prompt and answer together), when known.
    /// With a window, every request of an agent is checked against it before it is
    /// sent, and the agent's [`ContextPolicy`](crate::agent::ContextPolicy) decides what
    /// happens to one that would not fit. `None` (the default, and for every table
    /// entry and preset: servers are started with windows of their own) means no check;
    /// [`AgentBuilder::context_window`](crate::AgentBuilder::context_window) sets one
    /// per agent.
    pub context_window: Option<u32>,
}

impl ModelCapabilities {
    /// Everything is sent as given: the capabilities of a model the tables do not know.
    ///
    /// Tools and a native response format are each accepted; the two together are not
    /// assumed (see [`native_output_with_tools`](Self::native_output_with_tools)).
    pub const PERMISSIVE: Self = Self {
        reasoning: true,
        sampling: true,
        max_completion_tokens: false,
        known: false,
        tools: true,
        native_output: true,
        native_output_with_tools: false,
        context_window: None,
    };

    /// A chat model that does not reason and takes sampling parameters.
    pub(crate) const CHAT: Self = Self {
        reasoning: false,
        sampling: true,
        max_completion_tokens: false,
        known: true,
        tools: true,
        native_output: true,
        native_output_with_tools: true,
        context_window: None,
    };

    /// The capabilities of an OpenAI model by name (case-insensitive; a
    /// `provider/` prefix as routers write it, e.g. `openai/o3`, is ignored):
    /// - `o1*`, `o3*`, `o4*`, `gpt-5*` except `gpt-5-chat*`: reasoning, no sampling
    ///   parameters, `max_completion_tokens`;
    /// - `gpt-3.5*`, `gpt-4*` (`gpt-4o`, `gpt-4.1`, ...), `chatgpt-4o*`, `gpt-5-chat*`:
    ///   no reasoning, sampling parameters;
    /// - anything else: [`PERMISSIVE`](Self::PERMISSIVE).
    pub fn openai(model: &str) -> Self {
        let name = base_name(model);
        let reasoning_family = ["o1", "o3", "o4"]
            .iter()
            .any(|p| name == *p || name.starts_with(&format!("{p}-")));
        if reasoning_family || (name.starts_with("gpt-5") && !name.starts_with("gpt-5-chat")) {
            return Self {
                reasoning: true,
                sampling: false,
                max_completion_tokens: true,
                ..Self::CHAT
            };
        }
        if ["gpt-3.5", "gpt-4", "chatgpt-4o", "gpt-5-chat"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            return Self::CHAT;
        }
        Self::PERMISSIVE
    }

    /// The capabilities of an Anthropic model by name (case-insensitive; a `provider/`
    /// prefix is ignored):
    /// - `claude-3-7*` and every `claude-*-4*` / `claude-4*` model (Sonnet, Opus, Haiku
    ///   4 and later): extended thinking and sampling parameters;
    /// - `claude-3*` otherwise (3, 3.5): no extended thinking;
    /// - anything else: [`PERMISSIVE`](Self::PERMISSIVE).
    pub fn anthropic(model: &str) -> Self {
        let name = base_name(model);
        if name.starts_with("claude-3-7") {
            return Self {
                reasoning: true,
                ..Self::CHAT
            };
        }
        if name.starts_with("claude-3") {
            return Self::CHAT;
        }
        let generation = name
            .strip_prefix("claude-")
            .map(|rest| rest.split('-').find_map(|part| part.parse::<u32>().ok()));
        match generation {
            Some(Some(major)) if major >= 4 => Self {
                reasoning: true,
                ..Self::CHAT
            },
            _ => Self::PERMISSIVE,
        }
    }

    /// Sets [`reasoning`](Self::reasoning).
    pub fn reasoning(mut self, yes: bool) -> Self {
        self.reasoning = yes;
        self
    }

    /// Sets [`sampling`](Self::sampling).
    pub fn sampling(mut self, yes: bool) -> Self {
        self.sampling = yes;
        self
    }

    /// Sets [`max_completion_tokens`](Self::max_completion_tokens).
    pub fn max_completion_tokens(mut self, yes: bool) -> Self {
        self.max_completion_tokens = yes;
        self
    }

    /// Sets [`known`](Self::known).
    pub fn known(mut self, yes: bool) -> Self {
        self.known = yes;
        self
    }

    /// Sets [`tools`](Self::tools).
    pub fn tools(mut self, yes: bool) -> Self {
        self.tools = yes;
        self
    }

    /// Sets [`native_output`](Self::native_output).
    pub fn native_output(mut self, yes: bool) -> Self {
        self.native_output = yes;
        self
    }

    /// Sets [`native_output_with_tools`](Self::native_output_with_tools).
    pub fn native_output_with_tools(mut self, yes: bool) -> Self {
        self.native_output_with_tools = yes;
        self
    }

    /// Sets [`context_window`](Self::context_window) to `tokens`.
    pub fn context_window(mut self, tokens: u32) -> Self {
        self.context_window = Some(tokens);
        self
    }

    /// llama.cpp's `llama-server` (OpenAI-compatible, started with `--jinja` for tool
    /// calling): tools, and a native response format without tools. Not both on one
    /// request: the server aborts ("Content path must be a string") once a tool
    /// result is in the conversation (reported with Qwen2.5-Coder-1.5B: three runs of
    /// three).
    pub const fn llama_cpp() -> Self {
        Self::local_server()
    }

    /// Ollama's OpenAI-compatible endpoint: tools, and a native response format without
    /// tools. The combination is not declared: Ollama applies its format grammar to the
    /// whole reply, which can keep a model from calling a tool at all.
    pub const fn ollama() -> Self {
        Self::local_server()
    }

    /// vLLM's OpenAI-compatible server: tools (with a tool parser configured), and
    /// guided decoding for a response format without tools. The combination is not
    /// declared: guided decoding constrains the whole reply, tool calls included.
    pub const fn vllm() -> Self {
        Self::local_server()
    }

    /// What the local OpenAI-compatible servers share: [`PERMISSIVE`](Self::PERMISSIVE)
    /// (every option as given, tools and a native format, not both on one request).
    const fn local_server() -> Self {
        Self::PERMISSIVE
    }
}

impl Default for ModelCapabilities {
    /// [`PERMISSIVE`](Self::PERMISSIVE).
    fn default() -> Self {
        Self::PERMISSIVE
    }
}

/// The lower-cased model name without a `provider/` prefix.
fn base_name(model: &str) -> String {
    let name = model.trim().to_ascii_lowercase();
    match name.rsplit_once('/') {
        Some((_, base)) => base.to_owned(),
        None => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openai_table_tells_reasoning_models_from_chat_models_and_unknown_names() {
        for name in [
            "o1",
            "o3-mini",
            "o4-mini",
            "gpt-5",
            "gpt-5-mini",
            "openai/o3",
        ] {
            let c = ModelCapabilities::openai(name);
            assert!(
                c.reasoning && !c.sampling && c.max_completion_tokens,
                "{name}"
            );
        }
        for name in [
            "gpt-4o-mini",
            "gpt-4.1",
            "GPT-3.5-turbo",
            "gpt-5-chat-latest",
        ] {
            assert_eq!(
                ModelCapabilities::openai(name),
                ModelCapabilities::CHAT,
                "{name}"
            );
        }
        for name in ["local", "qwen3:8b", "o1x", "deepseek-reasoner"] {
            assert!(
                !ModelCapabilities::openai(name).native_output_with_tools,
                "{name}"
            );
            assert_eq!(
                ModelCapabilities::openai(name),
                ModelCapabilities::PERMISSIVE,
                "{name}"
            );
        }
    }

    #[test]
    fn the_anthropic_table_knows_which_claude_models_think() {
        for name in [
            "claude-3-7-sonnet-latest",
            "claude-sonnet-4-5",
            "claude-opus-4-1-20250805",
            "claude-haiku-4-5",
            "claude-opus-4",
        ] {
            let c = ModelCapabilities::anthropic(name);
            assert!(c.reasoning && c.sampling && c.known, "{name}");
        }
        for name in ["claude-3-5-haiku-latest", "claude-3-opus-20240229"] {
            assert!(!ModelCapabilities::anthropic(name).reasoning, "{name}");
        }
        assert_eq!(
            ModelCapabilities::anthropic("my-gateway-model"),
            ModelCapabilities::PERMISSIVE
        );
    }
}
