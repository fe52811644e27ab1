//! [`InformationFlowPolicy`]: tool calls judged on where the model's context came from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use rein_core::hook::{EventKind, HookError, HookEvent, HookSite, Interest, SyncHook};
use rein_core::{BuildError, Confidentiality, PreActingEvent, ToolCapabilities};

/// What a rule does with a call it applies to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FlowAction {
    /// The call does not run; the model reads why.
    Deny,
    /// The call stops for a human (the agent's reply lists it as pending approval).
    #[default]
    Approve,
    /// The rule does not apply (the call runs unless another rule stops it).
    Allow,
}

/// A tool's declaration as the policy should see it, overriding what the tool itself
/// declares (for tools whose code you do not own). Absent keys keep the tool's own.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolFlowDeclaration {
    /// Whether a call changes state.
    pub changes_state: Option<bool>,
    /// Whether a call communicates outside.
    pub external: Option<bool>,
    /// The most confidential data an external call may carry.
    pub ceiling: Option<Confidentiality>,
}

/// Configuration of the [`InformationFlowPolicy`] (the `information_flow` section of a
/// `HooksConfig`), e.g. in YAML:
///
/// ```yaml
/// information_flow:
///   enabled: true
///   untrusted_action: approve   # deny | approve | allow
///   confidentiality: deny
///   rule_of_two: true
///   tools:
///     send_email: {external: true, ceiling: public}
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InformationFlowConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// A state-changing or external call under untrusted context or with untrusted
    /// arguments (default [`FlowAction::Approve`]).
    pub untrusted_action: FlowAction,
    /// An external call with data above its ceiling in context or arguments (default
    /// [`FlowAction::Deny`]).
    pub confidentiality: FlowAction,
    /// Untrusted input, private data and an acting call in one session need a human
    /// (default `true`).
    pub rule_of_two: bool,
    /// Declarations overriding the tools' own, by tool name (each must be a tool of
    /// the agent: checked at build). Default none.
    pub tools: BTreeMap<String, ToolFlowDeclaration>,
}

impl Default for InformationFlowConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            untrusted_action: FlowAction::Approve,
            confidentiality: FlowAction::Deny,
            rule_of_two: true,
            tools: BTreeMap::new(),
        }
    }
}

/// The built-in information-flow policy (priority 90: after the argument guards, before
/// the approval hook). A [`SyncHook`]: it decides from the event alone. Inherited by
/// subagents (their calls are judged with their own labels, which start from the
/// delegating call's).
///
/// The runtime labels everything the model sees (see [`rein_core::label`]) and every
/// tool declares what it can do ([`ToolCapabilities`]). This hook decides, on each
/// call's `PreActing`, from three facts only — the call's label (everything the session
/// held when the model made it), the label of the quarantined documents its arguments
/// carry, and the tool's declaration — never from the call's text:
///
/// 1. **Trusted action** ([`InformationFlowConfig::untrusted_action`], default
///    approve): a call that changes state or communicates outside, made while untrusted
///    content was in the model's context or carrying untrusted documents as arguments.
/// 2. **Confidentiality** ([`InformationFlowConfig::confidentiality`], default deny):
///    an external call while data above the tool's ceiling was in the context or in
///    its arguments.
/// 3. **Rule of Two** ([`InformationFlowConfig::rule_of_two`], default on): a session
///    that combines untrusted input, private data and a call that acts needs a human
///    for the call, whatever the two rules above allow.
///
/// A call a human decided on (approved after a stop) runs: the human is the decision.
/// Denials and stops name the rule and the label in the decision trail, the audit and
/// the error the model reads.
///
/// What this guarantees: no tool that declares it changes state or communicates
/// outside runs, under an untrusted context or with untrusted arguments, without the
/// policy's decision (a denial, a human, or the configuration's explicit `allow`). What
/// it does not: it trusts the declarations (a tool declared read-only that writes is not
/// stopped) and the labels of the application's own input; it cannot tell a harmless
/// untrusted call from a harmful one (that is the human's job), and a quarantined
/// document passed to a tool is the tool's to handle safely.
#[derive(Clone, Debug)]
pub struct InformationFlowPolicy {
    config: InformationFlowConfig,
}

/// Why a rule stopped a call.
struct Verdict {
    action: FlowAction,
    reason: String,
}

impl InformationFlowPolicy {
    /// The policy with this configuration (`enabled` is ignored: a constructed policy
    /// is on).
    pub fn new(config: InformationFlowConfig) -> Self {
        Self { config }
    }

    /// The configuration.
    pub fn config(&self) -> &InformationFlowConfig {
        &self.config
    }

    /// The tool's declaration with this policy's overrides.
    fn capabilities(&self, e: &PreActingEvent) -> ToolCapabilities {
        let mut caps = e.tool_capabilities();
        if let Some(d) = self.config.tools.get(&e.tool_use().name) {
            if let Some(v) = d.changes_state {
                caps = caps.changes_state(v);
            }
            if let Some(v) = d.external {
                caps.external = v;
            }
            if let Some(v) = d.ceiling {
                caps.ceiling = v;
            }
        }
        caps
    }

    /// The strictest verdict of the three rules for this call, if any applies.
    fn judge(&self, e: &PreActingEvent) -> Option<Verdict> {
        let caps = self.capabilities(e);
        let acts = caps.external || caps.changes_state == Some(true);
        if !acts {
            return None;
        }
        let context = e.label();
        let args = e.argument_label();
        let tool = &e.tool_use().name;
        let mut verdicts = Vec::new();
        if caps.external {
            let carried = context.join(args).confidentiality;
            if carried > caps.ceiling && self.config.confidentiality != FlowAction::Allow {
                verdicts.push(Verdict {
                    action: self.config.confidentiality,
                    reason: format!(
                        "information flow (confidentiality): `{tool}` sends data outside \
                         (ceiling {}), and {} data is in the {} (label {})",
                        caps.ceiling.as_str(),
                        carried.as_str(),
                        if context.confidentiality >= args.confidentiality {
                            "model's context"
                        } else {
                            "call's arguments"
                        },
                        context.join(args),
                    ),
                });
            }
        }
        if self.config.untrusted_action != FlowAction::Allow {
            if context.is_untrusted() {
                verdicts.push(Verdict {
                    action: self.config.untrusted_action,
                    reason: format!(
                        "information flow (trusted action): `{tool}` {} while untrusted \
                         content is in the model's context (label {context}), so the call \
                         may have been chosen by that content",
                        acts_phrase(&caps)
                    ),
                });
            } else if args.is_untrusted() {
                verdicts.push(Verdict {
                    action: self.config.untrusted_action,
                    reason: format!(
                        "information flow (trusted action): `{tool}` {} with untrusted \
                         documents as arguments (label {args})",
                        acts_phrase(&caps)
                    ),
                });
            }
        }
        let session = context.join(args);
        if self.config.rule_of_two
            && session.is_untrusted()
            && session.confidentiality >= Confidentiality::Private
        {
            verdicts.push(Verdict {
                action: FlowAction::Approve,
                reason: format!(
                    "information flow (rule of two): the session combines untrusted input \
                     and private data (label {session}), and `{tool}` {}: a human must confirm",
                    acts_phrase(&caps)
                ),
            });
        }
        // A denial before a stop: the strictest verdict wins, the first of its kind.
        let deny = verdicts.iter().position(|v| v.action == FlowAction::Deny);
        match deny {
            Some(i) => Some(verdicts.swap_remove(i)),
            None => verdicts.into_iter().next(),
        }
    }
}

fn acts_phrase(caps: &ToolCapabilities) -> &'static str {
    match (caps.external, caps.changes_state == Some(true)) {
        (true, true) => "changes state and communicates outside",
        (true, false) => "communicates outside",
        _ => "changes state",
    }
}

impl SyncHook for InformationFlowPolicy {
    fn name(&self) -> &str {
        "InformationFlowPolicy"
    }

    fn priority(&self) -> i32 {
        90
    }

    fn interest(&self) -> Interest {
        Interest::only(EventKind::PreActing)
    }

    /// Every tool named under `tools` must be a tool of the agent.
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        for tool in self.config.tools.keys() {
            site.expect_tool(&format!("information_flow.tools.{tool}"), tool)?;
        }
        Ok(())
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let HookEvent::PreActing(e) = event else {
            return Ok(());
        };
        if e.is_denied() || e.decided_by_human() {
            return Ok(());
        }
        if let Some(v) = self.judge(e) {
            match v.action {
                FlowAction::Deny => e.deny(v.reason),
                FlowAction::Approve => e.stop_for_human_because(v.reason),
                FlowAction::Allow => {}
            }
        }
        Ok(())
    }
}

impl InformationFlowConfig {
    /// Checks what can be checked without an agent (the tool names are checked at the
    /// agent's build).
    ///
    /// # Errors
    /// `BuildErrorKind::InvalidConfig` naming the key: an empty tool name under
    /// `information_flow.tools`.
    pub fn validate(&self) -> Result<(), BuildError> {
        if self.tools.keys().any(|k| k.trim().is_empty()) {
            return Err(BuildError::invalid_config(
                "information_flow.tools",
                "a tool name is empty",
            ));
        }
        Ok(())
    }
}
