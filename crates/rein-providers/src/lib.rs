//! rein's model providers: real models behind rein's [`Model`](rein_core::Model) trait,
//! used exactly like `ScriptedModel`.
//!
//! - [`OpenAiChatModel`] (feature `openai`): OpenAI and any OpenAI-compatible
//!   chat-completions server (vLLM, Ollama, llama.cpp's server, DeepSeek, DashScope).
//! - [`AnthropicModel`] (feature `anthropic`): the Messages API.
//!
//! Both stream over one HTTP [`transport`] (timeouts, retries of transient failures before
//! the first token with `Retry-After` honoured, typed errors, bounded response sizes) and
//! one linear, size-capped SSE parser, and apply the [`capabilities`] rules: options a
//! model does not support are dropped and logged, never sent. HTTP/1.1 or HTTP/2 over
//! rustls with the `ring` crypto provider, installed as the process default when the
//! first client is built unless the application installed one first.

#![cfg_attr(docsrs, feature(doc_cfg))]
// Without a provider feature only the shared configuration types are used.
#![cfg_attr(not(any(feature = "openai", feature = "anthropic")), allow(dead_code))]

#[cfg(feature = "anthropic")]
mod anthropic;
pub mod capabilities;
#[cfg(feature = "openai")]
mod openai;
mod sse;
#[cfg(all(feature = "openai", feature = "anthropic"))]
#[doc(hidden)]
pub mod sse_probe;
pub mod transport;
#[cfg(any(feature = "openai", feature = "anthropic"))]
mod typed;

#[cfg(feature = "anthropic")]
#[cfg_attr(docsrs, doc(cfg(feature = "anthropic")))]
pub use anthropic::{AnthropicModel, AnthropicModelBuilder};
pub use capabilities::ModelCapabilities;
#[cfg(feature = "openai")]
#[cfg_attr(docsrs, doc(cfg(feature = "openai")))]
pub use openai::{OpenAiChatModel, OpenAiChatModelBuilder};
pub use transport::{HttpConfig, RetryPolicy};

/// `text` cut to at most `max` bytes on a char boundary, with `…` when cut.
pub(crate) fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Installs rustls's `ring` crypto provider as the process default, once, unless one is
/// installed already (by the application, or by a dependency that enabled another
/// provider). Called before rein builds an HTTP client: reqwest is built without a
/// provider of its own (see `Cargo.toml`) and refuses to build a client without one.
pub(crate) fn ensure_tls_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err: a provider is installed already (by the application or another
        // thread), which is kept.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
