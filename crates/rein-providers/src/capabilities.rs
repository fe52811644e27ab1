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

pub use rein_core::model::ModelCapabilities;

/// The `reasoning_effort` levels OpenAI's reasoning models accept.
#[cfg(feature = "openai")]
pub(crate) const OPENAI_EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

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
