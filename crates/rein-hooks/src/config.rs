//! [`HooksConfig`]: one serde tree for every built-in hook, and [`Hooks`], the set it
//! builds and installs.

use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::approval::{ApprovalConfig, ApprovalHook, Approver, SharedApprover};
use super::audit::{
    AuditConfig, AuditHook, AuditSink, AuditSinkConfig, DynAuditSink, JsonlAuditSink,
    TracingAuditSink,
};
use super::dynamic_options::{DynamicOptionsConfig, DynamicOptionsHook};
use super::flow::{InformationFlowConfig, InformationFlowPolicy};
use super::latency::{LatencyConfig, LatencyHook};
use super::masking::{MaskingConfig, MaskingHook};
use super::self_correction::{SelfCorrectionConfig, SelfCorrectionHook};
use super::template_leak::{TemplateLeakConfig, TemplateLeakHook};
use super::tool_guard::{ToolGuardConfig, ToolGuardHook};
use rein_core::BuildError;
use rein_core::agent::AgentBuilder;
use rein_pii::{MaskerConfig, MaskerError};

/// Configuration of every built-in hook, deserializable with serde from any format
/// (JSON, TOML, YAML). Every section and key is optional; a missing key takes its
/// default, an unknown key is an error.
///
/// Defaults (the reference's): latency **on**; masking, audit, self-correction, tool
/// guard, dynamic options and approval **off**; `audit.mask_args = true`,
/// `self_correction.max_corrections = 1`, `masker.replacement = "***"`,
/// `dynamic_options.precise_temperature = 0.1`,
/// `dynamic_options.precise_reasoning_effort = "high"`.
///
/// ```
/// use rein::hooks::HooksConfig;
///
/// let config: HooksConfig = serde_json::from_str(r#"{
///     "masking": { "enabled": true },
///     "tool_guard": { "enabled": true, "numeric_caps": { "amount": 1000 } }
/// }"#)?;
/// let hooks = config.build()?;
/// assert_eq!(hooks.names(), ["ToolGuardHook", "LatencyHook", "MaskingHook"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HooksConfig {
    /// What counts as personal data, for masking and audit (see [`MaskerConfig`]).
    pub masker: MaskerConfig,
    /// [`LatencyHook`] (priority 50).
    pub latency: LatencyConfig,
    /// [`MaskingHook`] (priority 900).
    pub masking: MaskingConfig,
    /// [`AuditHook`] (priority 850).
    pub audit: AuditConfig,
    /// [`SelfCorrectionHook`] (priority 200).
    pub self_correction: SelfCorrectionConfig,
    /// [`ToolGuardHook`] (priority 20).
    pub tool_guard: ToolGuardConfig,
    /// [`DynamicOptionsHook`] (priority 70).
    pub dynamic_options: DynamicOptionsConfig,
    /// [`InformationFlowPolicy`] (priority 90): tool calls judged on the labels of
    /// the model's context (see [`rein_core::label`]).
    pub information_flow: InformationFlowConfig,
    /// [`ApprovalHook`] (priority 100).
    pub approval: ApprovalConfig,
    /// [`TemplateLeakHook`] (priority 190): leaked chat-template markup in a reply.
    pub template_leak: TemplateLeakConfig,
    /// Per-agent sections, so one file serves several agents: under an agent's name, a
    /// hook's settings replace the top-level ones **entirely** for that agent (e.g. a
    /// triage agent without `refund`: `agents: {triage: {tool_guard: {enabled: false},
    /// approval: {enabled: false}}}`). Apply one with [`HooksConfig::for_agent`]; every
    /// agent's hooks are then validated against that agent's tools as usual, so a typo
    /// still fails its build. Default: none.
    pub agents: std::collections::BTreeMap<String, AgentSection>,
    /// Budgets and prices for the agent ([`rein_core::budget`]), applied by
    /// [`Hooks::install`] as `AgentBuilder::call_budget`, `session_budget`, `user_budget`
    /// and `prices`.
    /// Default: none.
    pub budgets: BudgetsConfig,
}

/// The `budgets` section of a [`HooksConfig`]: e.g. in YAML
/// `budgets: {call: {model_calls: 8, output_tokens: 4000}, session: {cost: 2.5},
/// prices: {gpt-4o: {input_per_mtok: 2.5, output_per_mtok: 10.0}}}`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct BudgetsConfig {
    /// Every call's budget.
    pub call: Option<rein_core::Budget>,
    /// The session's budget, across calls and replicas.
    pub session: Option<rein_core::Budget>,
    /// Each user's budget, across its sessions and replicas (tokens, cost and model
    /// calls: `AgentBuilder::user_budget`).
    pub user: Option<rein_core::Budget>,
    /// Model prices, per million tokens, for cost budgets.
    pub prices: Option<rein_core::Prices>,
}

impl BudgetsConfig {
    /// Every budget and price is valid.
    ///
    /// # Errors
    /// `BuildErrorKind::InvalidConfig` naming the key (`budgets.call.model_calls`,
    /// `budgets.prices.<model>.input_per_mtok`, …).
    pub fn validate(&self) -> Result<(), BuildError> {
        for (budget, key) in [
            (&self.call, "budgets.call"),
            (&self.session, "budgets.session"),
            (&self.user, "budgets.user"),
        ] {
            if let Some(b) = budget {
                b.validate(key)
                    .map_err(|m| BuildError::invalid_config(key, m))?;
            }
        }
        if let Some(b) = &self.user {
            b.validate_user("budgets.user")
                .map_err(|m| BuildError::invalid_config("budgets.user", m))?;
        }
        if let Some(p) = &self.prices {
            p.validate()
                .map_err(|m| BuildError::invalid_config("budgets.prices", m))?;
        }
        Ok(())
    }
}

/// The hooks of one agent's section in a [`HooksConfig`] (`agents.<name>`): each key
/// present replaces the top-level settings of that hook for the agent; absent keys keep
/// them. The masker is shared by every agent of one file.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
#[non_exhaustive]
pub struct AgentSection {
    /// Replaces `latency` for the agent.
    pub latency: Option<LatencyConfig>,
    /// Replaces `masking` for the agent.
    pub masking: Option<MaskingConfig>,
    /// Replaces `audit` for the agent.
    pub audit: Option<AuditConfig>,
    /// Replaces `self_correction` for the agent.
    pub self_correction: Option<SelfCorrectionConfig>,
    /// Replaces `tool_guard` for the agent.
    pub tool_guard: Option<ToolGuardConfig>,
    /// Replaces `dynamic_options` for the agent.
    pub dynamic_options: Option<DynamicOptionsConfig>,
    /// Replaces `information_flow` for the agent.
    pub information_flow: Option<InformationFlowConfig>,
    /// Replaces `approval` for the agent.
    pub approval: Option<ApprovalConfig>,
    /// Replaces `template_leak` for the agent.
    pub template_leak: Option<TemplateLeakConfig>,
}

/// What a configuration cannot express: the approver and a custom audit sink.
#[derive(Clone, Default)]
pub struct HookServices {
    approver: Option<SharedApprover>,
    audit_sink: Option<Arc<dyn DynAuditSink>>,
}

impl std::fmt::Debug for HookServices {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookServices")
            .field("approver", &self.approver.is_some())
            .field("audit_sink", &self.audit_sink.is_some())
            .finish()
    }
}

impl HookServices {
    /// No approver; the audit sink from the configuration.
    pub fn new() -> Self {
        Self::default()
    }

    /// The approver of the [`ApprovalHook`].
    #[must_use]
    pub fn approver(mut self, approver: impl Approver) -> Self {
        self.approver = Some(SharedApprover::new(approver));
        self
    }

    /// The sink of the [`AuditHook`], instead of the configured one.
    #[must_use]
    pub fn audit_sink(mut self, sink: impl AuditSink) -> Self {
        self.audit_sink = Some(Arc::new(sink));
        self
    }

    /// The sink of the [`AuditHook`], shared: keep a clone of the `Arc` to read it.
    #[must_use]
    pub fn audit_sink_arc<S: AuditSink>(mut self, sink: Arc<S>) -> Self {
        self.audit_sink = Some(sink);
        self
    }
}

/// The enabled built-in hooks, built from a [`HooksConfig`]. Cheap to clone: every
/// hook is an `Arc`, so installing the same `Hooks` on several agents shares the
/// instances (one latency histogram set, one audit queue).
#[derive(Clone, Debug, Default)]
pub struct Hooks {
    tool_guard: Option<Arc<ToolGuardHook>>,
    latency: Option<Arc<LatencyHook>>,
    dynamic_options: Option<Arc<DynamicOptionsHook>>,
    information_flow: Option<Arc<InformationFlowPolicy>>,
    approval: Option<Arc<ApprovalHook>>,
    template_leak: Option<Arc<TemplateLeakHook>>,
    self_correction: Option<Arc<SelfCorrectionHook>>,
    audit: Option<Arc<AuditHook>>,
    masking: Option<Arc<MaskingHook>>,
    budgets: BudgetsConfig,
}

impl Hooks {
    /// Adds every hook to the builder, in priority order, and the configured budgets and
    /// prices (`budgets`).
    pub fn install<S>(&self, builder: AgentBuilder<S>) -> AgentBuilder<S> {
        let mut b = builder;
        macro_rules! add {
            ($($field:ident),*) => {$(
                if let Some(h) = &self.$field {
                    b = b.hook(Arc::clone(h));
                }
            )*};
        }
        add!(
            tool_guard,
            latency,
            dynamic_options,
            information_flow,
            approval,
            template_leak,
            self_correction,
            audit
        );
        if let Some(budget) = &self.budgets.call {
            b = b.call_budget(budget.clone());
        }
        if let Some(budget) = &self.budgets.session {
            b = b.session_budget(budget.clone());
        }
        if let Some(budget) = &self.budgets.user {
            b = b.user_budget(budget.clone());
        }
        if let Some(prices) = &self.budgets.prices {
            b = b.prices(prices.clone());
        }
        // With its stream filter: the agent's own stream is masked by default.
        if let Some(masking) = &self.masking {
            let mask = Arc::clone(masking);
            b = b
                .hook(Arc::clone(masking))
                .stream_filter(move |s| rein_core::AgentStream::from_stream(mask.mask_stream(s)));
        }
        b
    }

    /// Hook names in priority order.
    pub fn names(&self) -> Vec<&'static str> {
        [
            self.tool_guard.as_ref().map(|_| "ToolGuardHook"),
            self.latency.as_ref().map(|_| "LatencyHook"),
            self.dynamic_options.as_ref().map(|_| "DynamicOptionsHook"),
            self.information_flow
                .as_ref()
                .map(|_| "InformationFlowPolicy"),
            self.approval.as_ref().map(|_| "ApprovalHook"),
            self.template_leak.as_ref().map(|_| "TemplateLeakHook"),
            self.self_correction.as_ref().map(|_| "SelfCorrectionHook"),
            self.audit.as_ref().map(|_| "AuditHook"),
            self.masking.as_ref().map(|_| "MaskingHook"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }

    /// The tool guard, if enabled.
    pub fn tool_guard(&self) -> Option<&Arc<ToolGuardHook>> {
        self.tool_guard.as_ref()
    }

    /// The latency hook, if enabled (read its [`LatencyHook::snapshot`]).
    pub fn latency(&self) -> Option<&Arc<LatencyHook>> {
        self.latency.as_ref()
    }

    /// The dynamic options hook, if enabled.
    pub fn dynamic_options(&self) -> Option<&Arc<DynamicOptionsHook>> {
        self.dynamic_options.as_ref()
    }

    /// The information-flow policy, if enabled.
    pub fn information_flow(&self) -> Option<&Arc<InformationFlowPolicy>> {
        self.information_flow.as_ref()
    }

    /// The approval hook, if enabled.
    pub fn approval(&self) -> Option<&Arc<ApprovalHook>> {
        self.approval.as_ref()
    }

    /// The template-markup hook, if enabled.
    pub fn template_leak(&self) -> Option<&Arc<TemplateLeakHook>> {
        self.template_leak.as_ref()
    }

    /// The self-correction hook, if enabled.
    pub fn self_correction(&self) -> Option<&Arc<SelfCorrectionHook>> {
        self.self_correction.as_ref()
    }

    /// The audit hook, if enabled (call [`AuditHook::flush`] before shutting down).
    pub fn audit(&self) -> Option<&Arc<AuditHook>> {
        self.audit.as_ref()
    }

    /// The masking hook, if enabled (wrap streams with [`MaskingHook::mask_stream`]).
    pub fn masking(&self) -> Option<&Arc<MaskingHook>> {
        self.masking.as_ref()
    }
}

fn masker_key(err: &MaskerError) -> String {
    match err {
        MaskerError::Config { key, .. } => format!("masker.{key}"),
        _ => "masker".to_owned(),
    }
}

impl HooksConfig {
    /// The configuration of the agent named `agent`: the top level with the hooks of
    /// its section (`agents.<agent>`) in place of the top-level ones; the top level
    /// itself when the file has no section for it. Sections do not nest.
    ///
    /// ```
    /// use rein::hooks::HooksConfig;
    ///
    /// let config: HooksConfig = serde_yaml_ng::from_str(
    ///     "tool_guard: {enabled: true, tools: [refund], numeric_caps: {amount: 1000}}\n\
    ///      agents:\n  triage: {tool_guard: {enabled: false}}\n",
    /// )?;
    /// assert!(config.for_agent("service").tool_guard.enabled);
    /// assert!(!config.for_agent("triage").tool_guard.enabled);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_agent(&self, agent: &str) -> HooksConfig {
        let mut c = self.clone();
        c.agents.clear();
        let Some(section) = self.agents.get(agent) else {
            return c;
        };
        macro_rules! take {
            ($($field:ident),*) => {$(
                if let Some(v) = &section.$field {
                    c.$field = v.clone();
                }
            )*};
        }
        take!(
            latency,
            masking,
            audit,
            self_correction,
            tool_guard,
            dynamic_options,
            information_flow,
            approval,
            template_leak
        );
        c
    }

    /// Builds the enabled hooks with no approver and the configured audit sink.
    ///
    /// # Errors
    /// See [`HooksConfig::build_with`].
    pub fn build(&self) -> Result<Hooks, BuildError> {
        self.build_with(HookServices::new())
    }

    /// Builds the enabled hooks. Every section is validated, enabled or not (only the
    /// audit file of a disabled audit section is not opened, and only an enabled
    /// approval section needs an approver).
    ///
    /// # Errors
    /// [`BuildErrorKind::InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig), the
    /// message naming the key: an extra masker pattern that does not compile
    /// (`masker.extra_patterns[0].regex`), a bad pattern name or unknown disabled kind,
    /// a negative or inconsistent numeric cap (`tool_guard.numeric_caps.amount`), a
    /// malformed parameter address, a negative precise temperature, a zero approval
    /// timeout, approval mode `await` without an approver (`approval.mode`), or an
    /// audit file that cannot be opened (`audit.sink.path`).
    pub fn build_with(&self, services: HookServices) -> Result<Hooks, BuildError> {
        let masker = self
            .masker
            .build()
            .map_err(|e| BuildError::invalid_config(&masker_key(&e), &e))?;
        self.budgets.validate()?;
        let tool_guard = ToolGuardHook::new(self.tool_guard.clone())?;
        let dynamic_options = DynamicOptionsHook::new(self.dynamic_options.clone())?;
        self.information_flow.validate()?;
        self.approval.validate()?;
        let approval = if self.approval.enabled {
            Some(ApprovalHook::new(
                self.approval.clone(),
                services.approver.clone(),
            )?)
        } else {
            None
        };
        let audit = if self.audit.enabled {
            let sink: Arc<dyn DynAuditSink> = match (&services.audit_sink, &self.audit.sink) {
                (Some(sink), _) => Arc::clone(sink),
                (None, AuditSinkConfig::Tracing) => Arc::new(TracingAuditSink),
                (None, AuditSinkConfig::Jsonl { path, durability }) => {
                    Arc::new(JsonlAuditSink::open_configured(path, *durability)?)
                }
            };
            Some(Arc::new(AuditHook::with_erased(
                self.audit.clone(),
                masker.clone(),
                sink,
            )))
        } else {
            None
        };
        Ok(Hooks {
            tool_guard: self.tool_guard.enabled.then(|| Arc::new(tool_guard)),
            latency: self
                .latency
                .enabled
                .then(|| Arc::new(LatencyHook::new(self.latency.clone()))),
            dynamic_options: self
                .dynamic_options
                .enabled
                .then(|| Arc::new(dynamic_options)),
            information_flow: self
                .information_flow
                .enabled
                .then(|| Arc::new(InformationFlowPolicy::new(self.information_flow.clone()))),
            approval: approval.map(Arc::new),
            template_leak: self
                .template_leak
                .enabled
                .then(|| Arc::new(TemplateLeakHook::new(self.template_leak.clone()))),
            self_correction: self
                .self_correction
                .enabled
                .then(|| Arc::new(SelfCorrectionHook::new(self.self_correction.clone()))),
            audit,
            masking: self
                .masking
                .enabled
                .then(|| Arc::new(MaskingHook::new(self.masking.clone(), masker))),
            budgets: self.budgets.clone(),
        })
    }

    /// Reads a configuration file, the format chosen by its extension: `.json`,
    /// `.yaml` / `.yml`, or `.toml`. Build it with [`HooksConfig::build`] and add the
    /// hooks to an agent with [`Hooks::install`].
    ///
    /// # Errors
    /// [`BuildErrorKind::InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) naming
    /// the file: it cannot be read, its extension is none of the above, or it does not
    /// parse (the message carries the parser's line and column, and the unknown or
    /// mistyped key).
    pub fn from_path(path: impl AsRef<Path>) -> Result<Self, BuildError> {
        Self::from_path_with_vars(path, &|name| std::env::var(name).ok())
    }

    /// [`HooksConfig::from_path`] with `${NAME}` references resolved by `vars` instead
    /// of the process environment: how a service sets per-replica values (the audit
    /// file, an approver's endpoint) in code while one file serves every replica.
    /// References are substituted in the parsed string values, never in the file's
    /// text, so a value cannot change the configuration's structure; a whole-value
    /// reference to a number or a boolean becomes that value.
    ///
    /// # Errors
    /// As [`HooksConfig::from_path`]; a reference `vars` cannot resolve names the
    /// variable and the key (`at `audit.sink.path`: environment variable `X` is not
    /// set`).
    pub fn from_path_with_vars(
        path: impl AsRef<Path>,
        vars: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, BuildError> {
        let path = path.as_ref();
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|e| BuildError::invalid_config(&shown, format!("cannot read: {e}")))?;
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        if !matches!(ext.as_deref(), Some("json" | "yaml" | "yml" | "toml")) {
            return Err(BuildError::invalid_config(
                &shown,
                "unknown configuration format: use a .json, .yaml, .yml or .toml file",
            ));
        }
        if text.contains("${") {
            return Self::from_text_with_env(&text, ext.as_deref(), vars)
                .map_err(|e| BuildError::invalid_config(&shown, e));
        }
        let parsed = match ext.as_deref() {
            Some("json") => serde_json::from_str(&text).map_err(|e| e.to_string()),
            Some("toml") => toml::from_str(&text).map_err(|e| e.to_string()),
            _ => serde_yaml_ng::from_str(&text).map_err(|e| e.to_string()),
        };
        parsed.map_err(|e| BuildError::invalid_config(&shown, e))
    }

    /// A configuration whose string values may name environment variables, `${NAME}`
    /// (e.g. a per-replica audit file: `path: /var/log/rein/${HOSTNAME}.jsonl`, or an
    /// approver's endpoint), substituted in the parsed values — never in the file's text,
    /// so a variable's value cannot change the file's structure. A variable that is not
    /// set is an error naming it; the typed error names the key path.
    fn from_text_with_env(
        text: &str,
        ext: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, String> {
        let mut value: serde_json::Value = match ext {
            Some("json") => serde_json::from_str(text).map_err(|e| e.to_string())?,
            Some("toml") => toml::from_str(text).map_err(|e| e.to_string())?,
            _ => serde_yaml_ng::from_str(text).map_err(|e| e.to_string())?,
        };
        substitute_strings(&mut value, "", env)?;
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            format!("at `{path}`: {}", e.inner())
        })
    }
}

/// Substitutes `${NAME}` in every string of `value` (`at` names where, for errors).
fn substitute_strings(
    value: &mut serde_json::Value,
    at: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    match value {
        serde_json::Value::String(s) if s.contains("${") => {
            let done = rein_core::tool::substitute_env(s, env)
                .map_err(|e| format!("at `{}`: {e}", if at.is_empty() { "." } else { at }))?;
            // A whole-value reference to a number or a boolean becomes that value, so
            // `timeout_ms: ${APPROVAL_TIMEOUT_MS}` works.
            *value = match serde_json::from_str::<serde_json::Value>(&done) {
                Ok(v @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_)))
                    if s.trim().starts_with("${") && s.trim().ends_with('}') =>
                {
                    v
                }
                _ => serde_json::Value::String(done),
            };
        }
        serde_json::Value::Array(items) => {
            for (i, v) in items.iter_mut().enumerate() {
                substitute_strings(v, &format!("{at}[{i}]"), env)?;
            }
        }
        serde_json::Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let here = if at.is_empty() {
                    k.clone()
                } else {
                    format!("{at}.{k}")
                };
                substitute_strings(v, &here, env)?;
            }
        }
        _ => {}
    }
    Ok(())
}
