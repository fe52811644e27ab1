//! [`ApprovalHook`]: guarded tools wait for a decision before they run.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::condition::ArgCondition;
use rein_core::BuildError;
use rein_core::ToolUse;
use rein_core::agent::{AgentInfo, PENDING_CALLS_KEY, RunContext};
pub use rein_core::agent::{ApprovalDecision, ApprovalDecisions};
use rein_core::hook::StateKey;
use rein_core::hook::{EventKind, Hook, HookError, HookEvent, HookSite, Interest};

/// Metadata key on a reply stopped for a human: the ids of the guarded tool calls
/// waiting for a decision, in this agent or any subagent it delegated to (a JSON array
/// of strings). The same key as [`PENDING_CALL_IDS_KEY`](rein_core::agent::PENDING_CALL_IDS_KEY),
/// which every stop (an approval, a stopped subagent, an unknown outcome) uses: one name
/// per concept.
#[deprecated(
    since = "0.1.0",
    note = "the same key as `rein::agent::PENDING_CALL_IDS_KEY`; use that"
)]
pub const APPROVAL_PENDING_KEY: &str = rein_core::agent::PENDING_CALL_IDS_KEY;

/// Metadata key on a reply stopped for a human: the guarded tool calls waiting for a
/// decision, in full, with the path of the agent that waits (see
/// [`PENDING_CALLS_KEY`](rein_core::agent::PENDING_CALLS_KEY), the same key). Read them
/// with [`pending_approvals`] and decide with [`ApprovalDecisions::approve_call`] so
/// each decision is bound to exactly the call a human saw.
#[deprecated(
    since = "0.1.0",
    note = "the same key as `rein::agent::PENDING_CALLS_KEY`; use that"
)]
pub const APPROVAL_PENDING_CALLS_KEY: &str = rein_core::agent::PENDING_CALLS_KEY;

/// The tool calls a reply stopped for a human is waiting on (from its
/// [`PENDING_CALLS_KEY`] metadata), with their real arguments — in the agent
/// that replied or in any subagent of its delegation tree (a decision placed in the
/// resuming call's context reaches the subagent that waits). Empty when the reply did
/// not stop for approval.
pub fn pending_approvals(reply: &rein_core::Msg) -> Vec<ToolUse> {
    reply
        .metadata
        .get(PENDING_CALLS_KEY)
        .and_then(|v| serde_json::from_value::<Vec<ToolUse>>(v.clone()).ok())
        .unwrap_or_default()
}

/// The tool calls a session's stored history is waiting on for a human: the guarded
/// calls the last stop for approval recorded (on the stopped assistant message, under
/// [`PENDING_CALLS_KEY`]) that are still pending. Empty when the session is
/// not stopped for approval.
///
/// A stop for approval is saved with the session, so any agent instance sharing the
/// store (another replica, this service after a restart) can read what waits — e.g.
/// `pending_approvals_in(&agent.messages(&key).await)` — decide with
/// [`ApprovalDecisions::approve_call`], and resume with an empty input and the decisions
/// in the run context. With leases ([`AgentBuilder::leased_session_store`](rein_core::AgentBuilder::leased_session_store))
/// the approved call runs once across instances: concurrent resumes are serialized, and
/// a resume whose calls another one already resumed fails with
/// [`StoreErrorKind::Conflict`](rein_core::StoreErrorKind::Conflict) before anything runs.
/// (A replica that dies after the tool ran but before the session was saved leaves the
/// call pending: a later resume runs it again.)
///
/// Calls a subagent waits on are listed too (the parent's session stores them with the
/// delegation call that waits, with their agent path under
/// [`PENDING_CALLS_KEY`]), so a replica that never ran the call finds, decides
/// and resumes them from the store alone.
pub fn pending_approvals_in(history: &[rein_core::Msg]) -> Vec<ToolUse> {
    let Some(last) = history
        .iter()
        .rev()
        .find(|m| m.role == rein_core::Role::Assistant)
    else {
        return Vec::new();
    };
    let pending = rein_core::agent::pending_tool_uses(history);
    if pending.is_empty() {
        return Vec::new();
    }
    let below: Vec<String> = match last.metadata.get(PENDING_CALLS_KEY) {
        Some(Value::Array(calls)) => calls
            .iter()
            .filter(|c| {
                c.get("agent")
                    .and_then(Value::as_str)
                    .is_some_and(|a| a.contains('/'))
            })
            .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_owned))
            .collect(),
        _ => Vec::new(),
    };
    pending_approvals(last)
        .into_iter()
        .filter(|u| pending.iter().any(|p| p.id == u.id) || below.contains(&u.id))
        .collect()
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
    /// The tool call that would run if approved, with its real (unmasked) arguments
    /// (after every earlier hook's rewrites, e.g. a tool guard's cap).
    pub tool_use: ToolUse,
    /// The call as the model asked for it, before any hook rewrote it (equal to
    /// `tool_use` when nothing changed it).
    pub original: ToolUse,
}

/// Decides about guarded tool calls, asynchronously (a human behind a UI, a policy
/// service). Implement [`Approver::decide`] with `async fn`, or pass an async closure
/// `Fn(ApprovalRequest) -> impl Future<Output = ApprovalDecision>` (implemented for
/// those). The hook holds it as a [`SharedApprover`]: the future is erased at that one
/// boundary.
///
/// ```
/// use rein::hooks::{ApprovalDecision, ApprovalHook, ApprovalRequest, Approver};
///
/// /// Approves small refunds, denies the rest.
/// struct Policy;
///
/// impl Approver for Policy {
///     async fn decide(&self, request: ApprovalRequest) -> ApprovalDecision {
///         match request.tool_use.input["amount"].as_f64() {
///             Some(a) if a <= 100.0 => ApprovalDecision::Approve,
///             _ => ApprovalDecision::Deny("above 100".into()),
///         }
///     }
/// }
///
/// let hook = ApprovalHook::with_approver(Policy, ["refund"]);
/// // or with a closure:
/// let hook = ApprovalHook::with_approver(
///     |_request: ApprovalRequest| async { ApprovalDecision::Approve },
///     ["refund"],
/// );
/// # let _ = hook;
/// ```
pub trait Approver: Send + Sync + 'static {
    /// The decision for one call. [`ApprovalHook`] waits at most its timeout, then
    /// denies.
    fn decide(&self, request: ApprovalRequest) -> impl Future<Output = ApprovalDecision> + Send;
}

impl<F, Fut> Approver for F
where
    F: Fn(ApprovalRequest) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ApprovalDecision> + Send + 'static,
{
    fn decide(&self, request: ApprovalRequest) -> impl Future<Output = ApprovalDecision> + Send {
        self(request)
    }
}

/// The object-safe twin of [`Approver`]: the one place approver futures are erased.
trait DynApprover: Send + Sync + 'static {
    fn decide_erased(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision>;
}

impl<A: Approver> DynApprover for A {
    fn decide_erased(&self, request: ApprovalRequest) -> BoxFuture<'_, ApprovalDecision> {
        Box::pin(self.decide(request))
    }
}

/// A type-erased [`Approver`], shared by reference count (cheap to clone): what
/// [`ApprovalHook::new`] takes.
#[derive(Clone)]
pub struct SharedApprover(Arc<dyn DynApprover>);

impl SharedApprover {
    /// Shares an approver.
    pub fn new(approver: impl Approver) -> Self {
        Self(Arc::new(approver))
    }

    /// [`Approver::decide`], with the future boxed.
    pub fn decide(
        &self,
        request: ApprovalRequest,
    ) -> impl Future<Output = ApprovalDecision> + Send + '_ {
        self.0.decide_erased(request)
    }
}

impl fmt::Debug for SharedApprover {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SharedApprover")
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
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// Tools that need a decision (default none; an enabled hook needs at least one).
    /// Each must be a tool of the agent it is installed on (checked at `build()`).
    pub guarded_tools: Vec<String>,
    /// Per guarded tool, the condition under which a call needs a decision (default:
    /// every call of a guarded tool needs one). E.g. `refund: {path: /amount, gt: 100}`:
    /// refunds above 100 wait for a human, smaller ones run. Evaluated on the call's
    /// final form (after caps and rewrites). The pointer must address an argument the
    /// tool's schema declares (checked at `build()`).
    pub when: BTreeMap<String, ArgCondition>,
    /// How long the approver may take, in milliseconds (default 60 000); no decision
    /// in time denies the call.
    pub timeout_ms: u64,
    /// How decisions are obtained (default `await`).
    pub mode: ApprovalMode,
}

impl ApprovalConfig {
    /// Checks what can be checked without an approver or an agent: the timeout, that
    /// an enabled hook guards something, the conditions.
    pub(crate) fn validate(&self) -> Result<(), BuildError> {
        if self.timeout_ms == 0 {
            return Err(BuildError::invalid_config(
                "approval.timeout_ms",
                "must be greater than 0",
            ));
        }
        if self.enabled && self.guarded_tools.is_empty() {
            return Err(BuildError::invalid_config(
                "approval.guarded_tools",
                "an enabled approval hook needs at least one guarded tool",
            ));
        }
        for (tool, condition) in &self.when {
            let key = format!("approval.when.{tool}");
            if !self.guarded_tools.contains(tool) {
                return Err(BuildError::invalid_config(
                    &key,
                    format!("`{tool}` is not in approval.guarded_tools"),
                ));
            }
            condition.validate(&key)?;
        }
        Ok(())
    }
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            guarded_tools: Vec::new(),
            when: BTreeMap::new(),
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
/// In mode `stop_for_human`, a guarded call without a decision stops the call for a
/// human at `PreActing` ([`PreActingEvent::stop_for_human`](rein_core::PreActingEvent::stop_for_human)),
/// after admission and after every earlier hook's rewrite (a tool guard's cap), and
/// only when the condition holds on that final form: nothing of the turn runs, and the
/// reply lists the call that would run, with the model's original, under
/// [`PENDING_CALLS_KEY`] (ids under [`PENDING_CALL_IDS_KEY`](rein_core::agent::PENDING_CALL_IDS_KEY)). The calls stay
/// pending in the session; resume with the decisions (`Agent::resume`). A call whose
/// arguments fail admission never reaches a human.
///
/// Tool arguments are never logged (they may hold personal data); the hook logs the
/// tool name, call id and outcome.
pub struct ApprovalHook {
    config: ApprovalConfig,
    approver: Option<SharedApprover>,
    /// This instance's key in the per-call hook state, where the calls it rewrote with
    /// an [`ApprovalDecision::Edit`] wait for their re-check pass (dropped with the
    /// call, whatever happened to it).
    id: StateKey,
    /// Edited calls whose re-check pass has not come yet, over every call in flight.
    in_flight: Arc<AtomicUsize>,
}

/// The calls one hook instance edited in one call, by id, until their re-check pass.
struct Edits {
    calls: HashMap<String, ToolUse>,
    in_flight: Arc<AtomicUsize>,
}

impl Drop for Edits {
    fn drop(&mut self) {
        self.in_flight
            .fetch_sub(self.calls.len(), Ordering::Relaxed);
    }
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
    /// [`BuildErrorKind::InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) naming
    /// `approval.timeout_ms` when it is 0, or `approval.mode` when the mode is `await`
    /// and there is no approver.
    pub fn new(
        config: ApprovalConfig,
        approver: Option<SharedApprover>,
    ) -> Result<Self, BuildError> {
        config.validate()?;
        if config.mode == ApprovalMode::Await && approver.is_none() {
            return Err(BuildError::invalid_config(
                "approval.mode",
                "mode `await` needs an approver (HookServices::approver or ApprovalHook::new); \
                 use mode `stop_for_human` to decide out of band",
            ));
        }
        Ok(Self {
            config,
            approver,
            id: StateKey::new(),
            in_flight: Arc::default(),
        })
    }

    /// A hook in mode `await` with this approver, guarding `tools`, with the default
    /// timeout. (An empty list fails the agent's build: the hook would guard nothing.)
    pub fn with_approver(
        approver: impl Approver,
        tools: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        let config = ApprovalConfig {
            enabled: true,
            guarded_tools: tools.into_iter().map(Into::into).collect(),
            ..ApprovalConfig::default()
        };
        Self {
            config,
            approver: Some(SharedApprover::new(approver)),
            id: StateKey::new(),
            in_flight: Arc::default(),
        }
    }

    fn remember_edit(&self, meta: rein_core::hook::CallState<'_>, call: ToolUse) {
        let in_flight = Arc::clone(&self.in_flight);
        meta.with(
            self.id,
            || Edits {
                calls: HashMap::new(),
                in_flight,
            },
            |edits| {
                if edits.calls.insert(call.id.clone(), call).is_none() {
                    edits.in_flight.fetch_add(1, Ordering::Relaxed);
                }
            },
        );
    }

    /// Whether `call` is exactly an edit this hook made in this call (taking the record
    /// out).
    fn take_edit(&self, meta: rein_core::hook::CallState<'_>, call: &ToolUse) -> bool {
        if self.in_flight.load(Ordering::Relaxed) == 0 {
            return false;
        }
        meta.update::<Edits, _>(self.id, |edits| {
            let hit = edits.calls.remove(&call.id);
            if hit.is_some() {
                edits.in_flight.fetch_sub(1, Ordering::Relaxed);
            }
            hit.is_some_and(|edited| &edited == call)
        })
        .unwrap_or(false)
    }

    /// How many calls this hook edited ([`ApprovalDecision::Edit`]) and has not seen
    /// again in their re-check pass yet, over every call in flight: 0 whenever no edited
    /// call is in flight. The edits are kept with the call they belong to, so nothing is
    /// left behind after a call, whatever the approver answered or a later hook did.
    pub fn edits_in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// The settings.
    pub fn config(&self) -> &ApprovalConfig {
        &self.config
    }

    fn guarded(&self, tool: &str) -> bool {
        self.config.guarded_tools.iter().any(|t| t == tool)
    }

    /// Whether this call needs a decision: a guarded tool whose condition (if any)
    /// holds for the call's arguments.
    fn needs_decision(&self, call: &ToolUse) -> bool {
        self.guarded(&call.name)
            && self
                .config
                .when
                .get(&call.name)
                .is_none_or(|c| c.holds(&call.input))
    }

    fn wait(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }

    async fn decision(
        &self,
        ctx: &RunContext,
        agent: &AgentInfo,
        call: &ToolUse,
        original: &ToolUse,
    ) -> ApprovalDecision {
        if let Some(d) = ctx
            .extensions()
            .get::<ApprovalDecisions>()
            .and_then(|d| d.apply(call))
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
            original: original.clone(),
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

    fn validate(&self) -> Result<(), HookError> {
        self.config
            .validate()
            .map_err(|e| HookError::new(e.to_string()))
    }

    /// Every guarded tool (and every tool a condition names) must be a tool of the
    /// agent, and every condition must read an argument the tool declares.
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        if !self.config.enabled {
            return Ok(());
        }
        for (i, tool) in self.config.guarded_tools.iter().enumerate() {
            site.expect_tool(&format!("approval.guarded_tools[{i}]"), tool)?;
        }
        for (tool, condition) in &self.config.when {
            condition.check_schema(&format!("approval.when.{tool}"), tool, site)?;
        }
        Ok(())
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled || self.config.guarded_tools.is_empty() {
            return Interest::NONE;
        }
        Interest::only(EventKind::PreActing)
    }

    /// The approval timeout plus a margin, so an agent-wide hook timeout never cuts an
    /// approval short (the hook's own timeout denies first).
    fn timeout(&self) -> Option<Duration> {
        Some(self.wait() + Duration::from_secs(5))
    }

    async fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        if let HookEvent::PreActing(e) = event {
            // An edit this hook made is approved when it comes back unchanged
            // (the hooks re-check an edited call); taken out either way.
            let own_edit = self.take_edit(e.state(), e.tool_use());
            // A call a human decided on after a stop was decided by the runtime,
            // which applied the decision before any hook saw it.
            if e.is_denied()
                || e.decided_by_human()
                || !self.needs_decision(e.tool_use())
                || own_edit
            {
                return Ok(());
            }
            let call = e.tool_use().clone();
            if self.config.mode == ApprovalMode::StopForHuman
                && e.context()
                    .extensions()
                    .get::<ApprovalDecisions>()
                    .is_none_or(|d| !d.has(&call.id))
            {
                // Decided on the call's final form (after every earlier rewrite):
                // the human sees exactly what would run.
                e.stop_for_human();
                return Ok(());
            }
            let original = e.original_tool_use().clone();
            let decision = self
                .decision(e.context(), e.agent(), &call, &original)
                .await;
            match decision {
                ApprovalDecision::Approve | ApprovalDecision::Retry => {
                    tracing::info!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, "approved");
                }
                ApprovalDecision::Edit(input) => {
                    tracing::info!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, "approved with edited arguments");
                    let edited = ToolUse { input, ..call };
                    // An edit that changes nothing is an approval: no re-check pass
                    // comes for it.
                    if edited.input != e.tool_use().input {
                        // The hooks re-check the edited call (this hook included);
                        // the approver is not asked about its own edit again.
                        self.remember_edit(e.state(), edited.clone());
                        e.set_tool_use(edited);
                    }
                }
                ApprovalDecision::Deny(reason) => {
                    tracing::warn!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, reason = %reason, "denied");
                    e.deny(reason);
                }
                ApprovalDecision::RecordOutcome(text) => {
                    tracing::info!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, "not run: the approver recorded its outcome");
                    e.deny(format!(
                        "not run; the approver recorded its outcome: {text}"
                    ));
                }
                // A decision this version does not know: fail closed.
                other => {
                    tracing::warn!(target: "rein::approval", tool = %call.name, tool_call_id = %call.id, decision = other.label(), "denied: unknown decision");
                    e.deny(format!(
                        "denied: the decision `{}` is not supported",
                        other.label()
                    ));
                }
            }
        }
        Ok(())
    }
}
