//! [`ApprovalHook`]: guarded tools wait for a decision before they run.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{AgentInfo, RunContext};
use crate::error::BuildError;
use crate::hook::{EventKind, Hook, HookError, HookEvent, Interest};
use crate::message::ToolUse;

/// Metadata key on a reply stopped for a human: the ids of the guarded tool calls
/// waiting for a decision (a JSON array of strings).
pub const APPROVAL_PENDING_KEY: &str = "rein.approval_pending";

/// What an approver decided about one tool call.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum ApprovalDecision {
    /// Run the call as it is.
    Approve,
    /// Do not run it; the model receives this reason in an error result.
    Deny(String),
    /// Run it with these arguments instead (what memory records too). The tool's JSON
    /// Schema still validates them; hooks that ran before the approval hook (the tool
    /// guard) do not see the edit.
    Edit(Value),
}

/// A guarded tool call waiting for a decision.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ApprovalRequest {
    /// The agent that wants to run the tool.
    pub agent: AgentInfo,
    /// The run id of the call.
    pub run_id: String,
    /// The session id.
    pub session_id: String,
    /// The user id, if the call has one.
    pub user_id: Option<String>,
    /// The tool call, with its real (unmasked) arguments.
    pub tool_use: ToolUse,
}

/// Decides about guarded tool calls, asynchronously (a human behind a UI, a policy
/// service). Implemented for async closures
/// `Fn(ApprovalRequest) -> impl Future<Output = ApprovalDecision>`.
pub trait Approver: Send + Sync + 'static {
    /// The decision for one call. [`ApprovalHook`] waits at most its timeout, then
    /// denies.
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision>;
}

impl<F, Fut> Approver for F
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ApprovalDecision> + Send + 'static,
{
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'static, ApprovalDecision> {
        Box::pin(self(request))
    }
}

/// Decisions made out of band (by a human, after a call stopped for approval), to put
/// in the resuming call's run context:
///
/// ```
/// use rein::RunContext;
/// use rein::hooks::ApprovalDecisions;
///
/// let ctx = RunContext::new().with_session_id("s1");
/// ctx.extensions().insert(ApprovalDecisions::new().approve("call_1_0"));
/// // agent.call_with(vec![], ctx) resumes the stopped call; the approved tool runs.
/// ```
#[derive(Clone, Debug, Default)]
pub struct ApprovalDecisions {
    by_call: HashMap<String, ApprovalDecision>,
}

impl ApprovalDecisions {
    /// No decisions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a decision for the tool call with this id.
    #[must_use]
    pub fn decide(mut self, tool_call_id: impl Into<String>, decision: ApprovalDecision) -> Self {
        self.by_call.insert(tool_call_id.into(), decision);
        self
    }

    /// Approves the tool call with this id.
    #[must_use]
    pub fn approve(self, tool_call_id: impl Into<String>) -> Self {
        self.decide(tool_call_id, ApprovalDecision::Approve)
    }

    /// Denies the tool call with this id.
    #[must_use]
    pub fn deny(self, tool_call_id: impl Into<String>, reason: impl Into<String>) -> Self {
        self.decide(tool_call_id, ApprovalDecision::Deny(reason.into()))
    }

    /// The decision for this tool call id.
    pub fn get(&self, tool_call_id: &str) -> Option<&ApprovalDecision> {
        self.by_call.get(tool_call_id)
    }
}

/// How guarded calls get their decision.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ApprovalMode {
    /// `PreActing` awaits the [`Approver`] (default). Needs an approver.
    #[default]
    Await,
    /// `PostReasoning` stops the call when the turn has guarded tool calls without a
    /// decision; the caller collects the decisions and resumes the session with
    /// [`ApprovalDecisions`] in the run context.
    StopForHuman,
}

/// Settings of [`ApprovalHook`] (the `approval` section of
/// [`HooksConfig`](super::HooksConfig)). Every key is optional.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// Tools that need a decision (default `submitRefund`).
    pub guarded_tools: Vec<String>,
    /// How long the approver may take, in milliseconds (default 60 000); no decision
    /// in time denies the call.
    pub timeout_ms: u64,
    /// How decisions are obtained (default `await`).
    pub mode: ApprovalMode,
}

impl ApprovalConfig {
    /// Checks what can be checked without an approver: the timeout.
    pub(crate) fn validate(&self) -> Result<(), BuildError> {
        if self.timeout_ms == 0 {
            return Err(BuildError::invalid_config(
                "approval.timeout_ms",
                "must be greater than 0",
            ));
        }
        Ok(())
    }
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            guarded_tools: vec!["submitRefund".to_owned()],
            timeout_ms: 60_000,
            mode: ApprovalMode::Await,
        }
    }
}

/// Makes guarded tools wait for a decision **before** they run. Priority **100**; off
/// by default in [`HooksConfig`](super::HooksConfig).
///
/// On `PreActing` of a guarded tool, the decision is, in order: the one recorded for
/// the call id in the run context's [`ApprovalDecisions`]; else (mode `await`) the
/// [`Approver`]'s, awaited at most `timeout_ms`; else none. [`ApprovalDecision::Approve`]
/// lets the call run, [`Edit`](ApprovalDecision::Edit) rewrites its arguments,
/// [`Deny`](ApprovalDecision::Deny) denies it with the reason. It fails closed: no
/// decision, a timeout or a panicking approver denies the call.
///
/// In mode `stop_for_human`, `PostReasoning` stops the call when the turn has guarded
/// tool calls without a decision (the reply carries their ids under
/// [`APPROVAL_PENDING_KEY`] in its metadata); the stopped tool calls stay pending in the
/// session. Resume with an empty input and the decisions in the run context.
///
/// Tool arguments are never logged (they may hold personal data); the hook logs the
/// tool name, call id and outcome.
pub struct ApprovalHook {
    config: ApprovalConfig,
    approver: Option<Arc<dyn Approver>>,
}

impl fmt::Debug for ApprovalHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ApprovalHook")
            .field("config", &self.config)
            .field("approver", &self.approver.is_some())
            .finish()
    }
}

impl ApprovalHook {
    /// A hook with these settings and approver.
    ///
    /// # Errors
    /// [`BuildErrorKind::InvalidConfig`](crate::BuildErrorKind::InvalidConfig) naming
    /// `approval.timeout_ms` when it is 0, or `approval.mode` when the mode is `await`
    /// and there is no approver.
    pub fn new(
        config: ApprovalConfig,
        approver: Option<Arc<dyn Approver>>,
    ) -> Result<Self, BuildError> {
        config.validate()?;
        if config.mode == ApprovalMode::Await && approver.is_none() {
            return Err(BuildError::invalid_config(
                "approval.mode",
                "mode `await` needs an approver (HookServices::approver or ApprovalHook::new); \
                 use mode `stop_for_human` to decide out of band",
            ));
        }
        Ok(Self { config, approver })
    }

    /// A hook in mode `await` with this approver and the default guarded tools and
    /// timeout, guarding `tools` instead when non-empty.
    pub fn with_approver(
        approver: impl Approver,
        tools: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let mut config = ApprovalConfig {
            enabled: true,
            ..ApprovalConfig::default()
        };
        let tools: Vec<String> = tools.into_iter().map(Into::into).collect();
        if !tools.is_empty() {
            config.guarded_tools = tools;
        }
        Self {
            config,
            approver: Some(Arc::new(approver)),
        }
    }

    /// The settings.
    pub fn config(&self) -> &ApprovalConfig {
        &self.config
    }

    fn guarded(&self, tool: &str) -> bool {
        self.config.guarded_tools.iter().any(|t| t == tool)
    }

    fn wait(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }

    async fn decision(
        &self,
        ctx: &RunContext,
        agent: &AgentInfo,
        call: &ToolUse,
    ) -> ApprovalDecision {
        if let Some(d) = ctx
            .extensions()
            .get::<ApprovalDecisions>()
            .and_then(|d| d.get(&call.id).cloned())
        {
            return d;
        }
        let Some(approver) = self
            .approver
            .as_ref()
            .filter(|_| self.config.mode == ApprovalMode::Await)
        else {
            return ApprovalDecision::Deny(format!(
                "tool `{}` needs approval and no decision was given for call `{}`",
                call.name, call.id
            ));
        };
        let request = ApprovalRequest {
            agent: agent.clone(),
            run_id: ctx.run_id().to_owned(),
            session_id: ctx.session_id().to_owned(),
            user_id: ctx.user_id().map(str::to_owned),
            tool_use: call.clone(),
        };
        // Created inside the guard: an approver that panics before returning its
        // future is caught too.
        let asked = AssertUnwindSafe(async { approver.decide(request).await }).catch_unwind();
        match tokio::time::timeout(self.wait(), asked).await {
            Ok(Ok(decision)) => decision,
            Ok(Err(panic)) => ApprovalDecision::Deny(format!(
                "the approver failed ({}); tool `{}` was not run",
                crate::util::panic_message(&*panic),
                call.name
            )),
            Err(_) => ApprovalDecision::Deny(format!(
                "no approval within {:?}; tool `{}` was not run",
                self.wait(),
                call.name
            )),
        }
    }
}

impl Hook for ApprovalHook {
    fn name(&self) -> &str {
        "ApprovalHook"
    }

    fn priority(&self) -> i32 {
        100
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled || self.config.guarded_tools.is_empty() {
            return Interest::NONE;
        }
        match self.config.mode {
            ApprovalMode::Await => Interest::only(EventKind::PreActing),
            ApprovalMode::StopForHuman => {
                Interest::only(EventKind::PreActing).with(EventKind::PostReasoning)
            }
        }
    }

    /// The approval timeout plus a margin, so an agent-wide hook timeout never cuts an
    /// approval short (the hook's own timeout denies first).
    fn timeout(&self) -> Option<Duration> {
        Some(self.wait() + Duration::from_secs(5))
    }

    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        match event {
            HookEvent::PreActing(e) => {
                if e.is_denied() || !self.guarded(&e.tool_use().name) {
                    return Ok(());
                }
                let call = e.tool_use().clone();
                let decision = self.decision(e.context(), e.agent(), &call).await;
                match decision {
                    ApprovalDecision::Approve => {
                        tracing::info!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, "approved");
                    }
                    ApprovalDecision::Edit(input) => {
                        tracing::info!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, "approved with edited arguments");
                        e.set_tool_use(ToolUse { input, ..call });
                    }
                    ApprovalDecision::Deny(reason) => {
                        tracing::warn!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, reason = %reason, "denied");
                        e.deny(reason);
                    }
                }
            }
            HookEvent::PostReasoning(e) if self.config.mode == ApprovalMode::StopForHuman => {
                let decided = e.context().extensions().get::<ApprovalDecisions>();
                let pending: Vec<String> = e
                    .message()
                    .tool_uses()
                    .into_iter()
                    .filter(|u| self.guarded(&u.name))
                    .filter(|u| decided.as_ref().is_none_or(|d| d.get(&u.id).is_none()))
                    .map(|u| u.id.clone())
                    .collect();
                if !pending.is_empty() {
                    tracing::info!(target: "rein::approval", pending = ?pending, "stopped for human approval");
                    let mut msg = e.message().clone();
                    msg.metadata.insert(
                        APPROVAL_PENDING_KEY.to_owned(),
                        Value::Array(pending.into_iter().map(Value::String).collect()),
                    );
                    e.set_message(msg);
                    e.stop_agent();
                }
            }
            _ => {}
        }
        Ok(())
    }
}
