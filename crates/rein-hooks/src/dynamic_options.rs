//! [`DynamicOptionsHook`]: switches to precise generation options when the user's
//! last message calls for care.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::HOOK_KEY;
use super::phrases::PhraseMatcher;
use rein_core::BuildError;
use rein_core::hook::{EventKind, FailurePolicy, HookError, HookEvent, Interest, SyncHook};
use rein_core::model::GenerateOptions;
use rein_core::{Msg, Role};

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Settings of [`DynamicOptionsHook`] (the `dynamic_options` section of
/// [`HooksConfig`](super::HooksConfig)). Every key is optional.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DynamicOptionsConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// Keywords that switch to the precise profile (default `投诉`, `退款`, `纠纷`,
    /// `赔偿`, `升级`, `维权`). ASCII letters match case-insensitively.
    pub precise_keywords: Vec<String>,
    /// Phrases containing a keyword that do not count (default `系统升级`,
    /// `会员升级`, `版本升级`).
    pub exclusion_phrases: Vec<String>,
    /// Temperature of the precise profile (default `0.1`; `null` leaves it alone).
    pub precise_temperature: Option<f64>,
    /// Reasoning effort of the precise profile (default `"high"`; `null` leaves it
    /// alone, for models without the option).
    pub precise_reasoning_effort: Option<String>,
    /// Further fields of the precise profile (default none), e.g.
    /// `{ "max_tokens": 1024 }`. `precise_temperature` and `precise_reasoning_effort`
    /// take precedence.
    pub precise_options: GenerateOptions,
}

impl Default for DynamicOptionsConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            precise_keywords: strings(&["投诉", "退款", "纠纷", "赔偿", "升级", "维权"]),
            exclusion_phrases: strings(&["系统升级", "会员升级", "版本升级"]),
            precise_temperature: Some(0.1),
            precise_reasoning_effort: Some("high".to_owned()),
            precise_options: GenerateOptions::default(),
        }
    }
}

/// Switches a model call to the precise profile when the last user message contains a
/// keyword. Priority **70**; off by default in [`HooksConfig`](super::HooksConfig).
///
/// On every `PreReasoning` (so the rule is re-evaluated each iteration), the last
/// user-authored message the model will receive is searched for a keyword (messages
/// synthesized by the runtime or by hooks, such as corrections, are skipped). On a
/// match, the precise profile is merged over the effective options with
/// [`GenerateOptions::merge`]: only the configured fields change, everything else (the
/// agent's defaults and earlier hooks' changes) is kept. Without a match the options
/// are left identical.
pub struct DynamicOptionsHook {
    config: DynamicOptionsConfig,
    precise: GenerateOptions,
    matcher: PhraseMatcher,
}

impl fmt::Debug for DynamicOptionsHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamicOptionsHook")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl DynamicOptionsHook {
    /// A hook with these settings.
    ///
    /// # Errors
    /// [`BuildErrorKind::InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) naming
    /// `dynamic_options.precise_temperature` when it is negative or not finite.
    pub fn new(config: DynamicOptionsConfig) -> Result<Self, BuildError> {
        if let Some(t) = config.precise_temperature
            && !(t.is_finite() && t >= 0.0)
        {
            return Err(BuildError::invalid_config(
                "dynamic_options.precise_temperature",
                format!("must be a finite number of at least 0 (got {t})"),
            ));
        }
        let shortcut = GenerateOptions {
            temperature: config.precise_temperature,
            reasoning_effort: config.precise_reasoning_effort.clone(),
            ..GenerateOptions::default()
        };
        let precise = GenerateOptions::merge(&shortcut, &config.precise_options);
        let matcher = PhraseMatcher::new(
            &config.precise_keywords,
            &config.exclusion_phrases,
            &[],
            0,
            &[],
        );
        Ok(Self {
            config,
            precise,
            matcher,
        })
    }

    /// The settings.
    pub fn config(&self) -> &DynamicOptionsConfig {
        &self.config
    }

    /// The precise profile merged over a call's options.
    pub fn precise_profile(&self) -> &GenerateOptions {
        &self.precise
    }

    /// The keyword of the last user-authored message in `messages`, if it has one.
    pub fn trigger<'a, 'm, I>(&'a self, messages: I) -> Option<&'a str>
    where
        I: IntoIterator<Item = &'m Msg>,
        I::IntoIter: DoubleEndedIterator,
    {
        let last = messages.into_iter().rev().find(|m| is_user_input(m))?;
        self.matcher.find(&last.text_cow())
    }
}

/// A user message that came from the caller, not from the runtime or a hook.
fn is_user_input(msg: &Msg) -> bool {
    msg.role == Role::User
        && !msg.metadata.contains_key(HOOK_KEY)
        && msg.metadata.get("rein.synthetic") != Some(&Value::Bool(true))
}

impl SyncHook for DynamicOptionsHook {
    fn name(&self) -> &str {
        "DynamicOptionsHook"
    }

    fn priority(&self) -> i32 {
        70
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled || self.precise.is_empty() {
            return Interest::NONE;
        }
        Interest::only(EventKind::PreReasoning)
    }

    fn failure_policy(&self) -> FailurePolicy {
        FailurePolicy::Ignore
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let HookEvent::PreReasoning(e) = event else {
            return Ok(());
        };
        let Some(keyword) = self.trigger(e.messages().iter()) else {
            return Ok(());
        };
        let merged = GenerateOptions::merge(&self.precise, e.generate_options());
        if merged != *e.generate_options() {
            tracing::info!(
                target: "rein::dynamic_options",
                agent = %e.agent().name,
                keyword,
                temperature = ?merged.temperature,
                reasoning_effort = ?merged.reasoning_effort,
                "precise generation profile applied"
            );
            e.set_generate_options(merged);
        }
        Ok(())
    }
}
