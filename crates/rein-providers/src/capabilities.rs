//! What a provider's model accepts, so the HTTP providers never send a request the
//! provider would reject.
//!
//! [`ModelCapabilities`] are looked up by model name in a small table
//! ([`ModelCapabilities::openai`], [`ModelCapabilities::anthropic`]) and can be set
//! explicitly on the provider builders (`capabilities(..)`), which replaces the table for
//! every call. A name the table does not know (a local or compatible server's model, a
//! model newer than this table) gets [`ModelCapabilities::PERMISSIVE`]: every option is
//! sent as given, exactly as before capabilities existed.
//!
//! # The rules, and why options are dropped or refused
//! [`GenerateOptions`](rein_core::GenerateOptions) are layered: the agent's defaults, then
//! whatever `PreReasoning` hooks merge over them (for example the precise profile of
//! `DynamicOptionsHook`, which by default asks for a low temperature *and* a high
//! reasoning effort without knowing the model). The provider cannot tell where a value
//! came from, so each rule is decided by what dropping the value would change:
//!
//! - **Sampling hints are dropped, with a `warn` log** (target `rein::model`, naming the
//!   option, the model and the reason; never silently): `reasoning_effort` for a model
//!   that does not reason; `temperature`, `top_p`, `top_k`, `frequency_penalty` and
//!   `presence_penalty` for a model that takes no sampling parameters (OpenAI's
//!   reasoning models); with Anthropic extended thinking, a `temperature` other than 1,
//!   a `top_p` outside 0.95..=1 and any `top_k` (the API's thinking rules). A hint says
//!   *how* to sample; the model answers the same request without it, so a profile
//!   written for many models stays usable on each.
//! - **Constraints the request cannot be made valid without are refused** with a
//!   [`ModelErrorKind::BadRequest`](rein_core::ModelErrorKind::BadRequest) error *before*
//!   the HTTP call, naming the option: they change *what* may be answered, so dropping
//!   them would silently change the result. With Anthropic extended thinking: a
//!   `tool_choice` that forces tool use (`Required` or a named tool), a thinking budget
//!   under 1,024 tokens, an explicit `max_tokens` not above the thinking budget. For a
//!   known OpenAI reasoning model: a `reasoning_effort` that is not one of its levels.
//! - **Renames are applied**: an OpenAI reasoning model receives `max_tokens` as
//!   `max_completion_tokens`.
//!
//! `extra_body` is never checked: it is the escape hatch and is sent as given.

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
}

/// The `reasoning_effort` levels OpenAI's reasoning models accept.
#[cfg(feature = "openai")]
pub(crate) const OPENAI_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

impl ModelCapabilities {
    /// Everything is sent as given: the capabilities of a model the tables do not know.
    pub const PERMISSIVE: Self = Self {
        reasoning: true,
        sampling: true,
        max_completion_tokens: false,
        known: false,
    };

    /// A chat model that does not reason and takes sampling parameters.
    const CHAT: Self = Self {
        reasoning: false,
        sampling: true,
        max_completion_tokens: false,
        known: true,
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
                known: true,
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

/// Logs a dropped option (the `warn` the module docs promise).
pub(crate) fn dropped(model: &str, option: &str, why: &str) {
    tracing::warn!(
        target: "rein::model",
        model,
        option,
        "`{option}` not sent to `{model}`: {why}"
    );
}

/// Removes the sampling hints a model without sampling parameters rejects, logging each.
pub(crate) fn drop_sampling(
    options: &mut rein_core::GenerateOptions,
    model: &str,
    why: &str,
    with_penalties: bool,
) {
    let drop_f64 = |name: &str, slot: &mut Option<f64>| {
        if slot.take().is_some() {
            dropped(model, name, why);
        }
    };
    drop_f64("temperature", &mut options.temperature);
    drop_f64("top_p", &mut options.top_p);
    if with_penalties {
        drop_f64("frequency_penalty", &mut options.frequency_penalty);
        drop_f64("presence_penalty", &mut options.presence_penalty);
    }
    if options.top_k.take().is_some() {
        dropped(model, "top_k", why);
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
