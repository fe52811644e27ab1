//! Model selection shared by the examples: a real provider when its API key is set and
//! its cargo feature is enabled, otherwise the offline `ScriptedModel`. Prints which, as
//! the example's first output line.

use std::sync::Arc;

use rein::*;

/// `true` when `var` is set to something other than blanks.
fn is_set(var: &str) -> bool {
    std::env::var(var).is_ok_and(|v| !v.trim().is_empty())
}

/// The real model to use, or `None` for the script. `OPENAI_API_KEY` wins over
/// `ANTHROPIC_API_KEY` when both are set.
pub(crate) fn real_model() -> Result<Option<Arc<dyn Model>>, BuildError> {
    #[cfg(feature = "openai")]
    if is_set("OPENAI_API_KEY") {
        let m = OpenAiChatModel::from_env()?;
        println!("model: {} at {} (OPENAI_API_KEY is set)", m.name(), m.url());
        return Ok(Some(Arc::new(m)));
    }
    #[cfg(feature = "anthropic")]
    if is_set("ANTHROPIC_API_KEY") {
        let m = AnthropicModel::from_env()?;
        println!(
            "model: {} at {} (ANTHROPIC_API_KEY is set)",
            m.name(),
            m.url()
        );
        return Ok(Some(Arc::new(m)));
    }
    let hint = if is_set("OPENAI_API_KEY") {
        "OPENAI_API_KEY is set, but the `openai` feature is off: add --features openai"
    } else if is_set("ANTHROPIC_API_KEY") {
        "ANTHROPIC_API_KEY is set, but the `anthropic` feature is off: add --features anthropic"
    } else {
        "set OPENAI_API_KEY or ANTHROPIC_API_KEY and add --all-features for a real model"
    };
    println!("model: ScriptedModel, offline and deterministic ({hint})");
    Ok(None)
}
