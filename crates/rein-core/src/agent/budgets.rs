//! The loop's side of budgets ([`crate::budget`]): the ledgers of a call, the checks
//! before every model call, tool call and safe point, the charges after, and the
//! session's stored record.

use std::sync::Arc;

use serde_json::Value;

use super::builder::AgentBuilder;
use super::memory::CallMemory;
use super::model_turn::Phase;
use super::run::{Call, emit};
use super::stream::AgentEvent;
use super::user_budget::UserBook;
use super::{AgentInner, CallOutcome};
use crate::budget::{
    BUDGET_KEY, Budget, BudgetExhausted, BudgetScope, Ledger, Prices, SPEND_KEY, Spend, Tokens,
    USER_BUDGET_SESSION, estimate_tokens, session_record, spend_record, stored_spend,
};
use crate::context::{RunContext, StopReason};
use crate::error::Error;
use crate::hook::{Decision, DecisionKind, EventKind};
use crate::message::{ContentBlock, Msg};
use crate::model::ModelRequest;
use crate::store::SessionKey;
use crate::tool::ToolSchema;

impl<S> AgentBuilder<S> {
    /// A budget for every call of this agent (see [`crate::budget`]): tokens, cost,
    /// model calls, tool calls and wall-clock time of one call, its subagents' spending
    /// included. Default: none.
    ///
    /// # Errors (at `build()`)
    /// [`BuildErrorKind::InvalidConfig`](crate::BuildErrorKind::InvalidConfig) naming
    /// `call_budget.<limit>` for a zero or negative limit, and `call_budget.cost` for a
    /// cost budget without a price for the agent's model ([`AgentBuilder::prices`]).
    pub fn call_budget(mut self, budget: Budget) -> Self {
        self.config.call_budget = Some((budget, BudgetScope::Call));
        self
    }

    /// A budget for each session of this agent, across its calls and across every
    /// replica sharing the session store (see [`crate::budget`]: what a session spent
    /// is kept with the session). Without a session store it holds for the session's
    /// life in this agent. Default: none. Errors at `build()` as
    /// [`AgentBuilder::call_budget`]'s, naming `session_budget`.
    pub fn session_budget(mut self, budget: Budget) -> Self {
        self.config.session_budget = Some(budget);
        self
    }

    /// A budget for each user (the [`RunContext::user_id`] of a call; calls without one
    /// share the budget of the anonymous user) across all its sessions, calls and
    /// subagents, and across every replica sharing the session store: tokens, cost and
    /// model calls (see [`crate::budget`]). The user's record is kept in the session
    /// store under the reserved session [`USER_BUDGET_SESSION`](crate::budget::USER_BUDGET_SESSION)
    /// and changed only by versioned saves, so replicas never double-spend it; without a
    /// session store it holds in this agent. Every model request then reads and saves
    /// that record before it is sent and after it answered (two store round trips
    /// each). Default: none.
    ///
    /// # Errors (at `build()`)
    /// As [`AgentBuilder::call_budget`]'s, naming `user_budget`; and
    /// `user_budget.tool_calls`, `.tool_calls_per_tool` or `.wall_clock_ms` (not limits
    /// a user budget keeps: use a call or session budget).
    pub fn user_budget(mut self, budget: Budget) -> Self {
        self.config.user_budget = Some(budget);
        self
    }

    /// Model prices for cost budgets (inherited by subagents). Default: none.
    ///
    /// # Errors (at `build()`)
    /// `BuildErrorKind::InvalidConfig` naming `prices.<model>.<field>` for a negative or
    /// non-finite price.
    pub fn prices(mut self, prices: Prices) -> Self {
        self.config.prices = Some(Arc::new(prices));
        self
    }
}

/// The ledgers of one call: its own (innermost: what the outcome reports) and the
/// session's, if the agent has a session budget.
pub(super) struct Ledgers {
    pub(super) own: Arc<Ledger>,
    pub(super) session: Option<Arc<Ledger>>,
    /// The bytes of the last request's tool schemas, by the schemas' allocation: a
    /// call's requests usually share one list, walked once.
    schema_bytes: Option<(Arc<[ToolSchema]>, usize)>,
}

impl Ledgers {
    /// The bytes of `tools`' text, walked once per schema list.
    fn schema_bytes(&mut self, tools: &Arc<[ToolSchema]>) -> usize {
        match &self.schema_bytes {
            Some((seen, n)) if Arc::ptr_eq(seen, tools) => *n,
            _ => {
                let n = schema_bytes(tools);
                self.schema_bytes = Some((Arc::clone(tools), n));
                n
            }
        }
    }
}

impl AgentInner {
    /// The call's ledgers, when any budget applies to it (its own, its session's, or
    /// one of the calls that delegated to it): chained innermost first, so every charge
    /// reaches every budget above.
    pub(super) fn ledgers(&self, ctx: &RunContext, memory: &CallMemory) -> Option<Ledgers> {
        let mut parent = ctx.ledger().cloned();
        if parent.is_none()
            && self.call_budget.is_none()
            && self.session_budget.is_none()
            && self.user_budget.is_none()
        {
            return None;
        }
        // A top-level call's user budget is the top of its chain (a subagent's call
        // reaches it through the delegating call's).
        if parent.is_none()
            && let Some((limits, store)) = &self.user_budget
        {
            let key = SessionKey::new(ctx.user_id(), USER_BUDGET_SESSION);
            let book = Arc::new(UserBook::new(Arc::clone(store), key));
            parent = Some(Ledger::user(limits.clone(), book, self.info.name.clone()));
        }
        // Agent paths from the top-level agent, as decisions and stream events name them.
        let path = match &parent {
            Some(p) if ctx.ledger().is_some() => format!("{}/{}", p.agent(), self.info.name),
            _ => self.info.name.clone(),
        };
        let session = self.session_budget.as_ref().map(|b| {
            let spent = memory.budget_record().map(stored_spend).unwrap_or_default();
            Ledger::new(
                BudgetScope::Session,
                b.clone(),
                spent,
                parent.clone(),
                path.clone(),
            )
        });
        let (limits, scope) = self
            .call_budget
            .clone()
            .unwrap_or((Budget::new(), BudgetScope::Call));
        let own = Ledger::new(
            scope,
            limits,
            Spend::default(),
            session.clone().or(parent),
            path,
        );
        Some(Ledgers {
            own,
            session,
            schema_bytes: None,
        })
    }
}

impl Call<'_> {
    /// One model call within the budgets: refused (`None`, the reason kept for
    /// [`Call::stop_for_budget`]) when a budget cannot pay for it, else sent with its
    /// `max_tokens` lowered to what the budgets leave, and charged with what it used.
    pub(super) async fn model_call(
        &mut self,
        memory: &mut CallMemory,
        mut request: ModelRequest,
        phase: Phase,
    ) -> Result<Option<Msg>, Error> {
        let Some(ledger) = self.ledgers.as_ref().map(|l| Arc::clone(&l.own)) else {
            return self.stream_model(request, phase).await.map(Some);
        };
        if let Err(e) = ledger.check_time() {
            self.exhausted = Some(Box::new(e));
            return Ok(None);
        }
        let price = self.agent.prices.as_ref().and_then(|p| {
            let model = request
                .options
                .model
                .as_deref()
                .unwrap_or_else(|| self.agent.model.name());
            p.get(model).copied()
        });
        let schemas = self
            .ledgers
            .as_mut()
            .map_or(0, |l| l.schema_bytes(&request.tools));
        let messages: usize = request.messages.iter().map(message_bytes).sum();
        let mut estimate = estimate_tokens(messages + schemas);
        // The window check's count of this request decides; near a limit one is asked for.
        if let Some(n) = self.counted.take() {
            estimate = n;
        } else if ledger.near_input_limit(estimate, request.options.max_tokens, price.as_ref())
            && let Some(n) = self.count_tokens(&request).await
        {
            estimate = n;
        }
        let user = ledger.user_book::<UserBook>();
        let turn = match &user {
            Some((book, _)) => Some(book.turn().await),
            None => None,
        };
        let admitted = match &user {
            None => ledger.admit_model_call(estimate, request.options.max_tokens, price.as_ref()),
            Some((book, mirror)) => {
                reserve_for_user(
                    &ledger,
                    book,
                    mirror,
                    estimate,
                    request.options.max_tokens,
                    price.as_ref(),
                )
                .await?
            }
        };
        drop(turn);
        let cap = match admitted {
            Ok(cap) => cap,
            Err(e) => {
                self.exhausted = Some(Box::new(e));
                return Ok(None);
            }
        };
        if cap.is_some() {
            request.options.max_tokens = cap;
        }
        // The worst case is kept with the session before it can be spent.
        self.save_session_record(memory, true).await?;
        let result = self.stream_model(request, phase).await;
        let u = self.last_usage;
        let used = match &result {
            // A provider that reports no usage is charged the estimates.
            Ok(msg) if u.input_tokens == 0 && u.output_tokens == 0 => Tokens {
                input: estimate,
                output: estimate_tokens(message_bytes(msg)),
                ..Tokens::default()
            },
            Ok(_) => Tokens {
                input: u.input_tokens,
                cached_input: u.cached_input_tokens,
                output: u.output_tokens,
                reasoning: u.reasoning_tokens,
            },
            // A failed request may have been billed: its worst case stays charged.
            Err(_) => Tokens {
                input: estimate,
                output: cap.map_or(0, u64::from),
                ..Tokens::default()
            },
        };
        let Some((book, _)) = &user else {
            ledger.settle_model_call(estimate, cap, used, price.as_ref());
            return result.map(Some);
        };
        {
            let _turn = book.turn().await;
            ledger.settle_model_call(estimate, cap, used, price.as_ref());
            let worst = Ledger::worst_case(estimate, cap, price.as_ref());
            let charge = Ledger::charge_of(used, price.as_ref());
            let settled = book
                .update(|spent, reserved| {
                    reserved.subtract(&worst);
                    spent.add(&charge);
                })
                .await;
            // On failure the reservation stays charged in the record: never a lost charge.
            if let Err(e) = settled {
                tracing::error!(
                    target: "rein::budget",
                    error = %e,
                    "saving what a request used to the user's budget record failed; its \
                     reservation stays charged"
                );
            }
        }
        result.map(Some)
    }

    /// Admits one tool call within the tool-call budgets (charging it), or says why not.
    pub(super) fn admit_tool_budget(&self, tool: &str) -> Option<(String, &'static str)> {
        let ledgers = self.ledgers.as_ref()?;
        match ledgers.own.admit_tool_call(tool) {
            Ok(()) => None,
            Err(e) => Some((
                format!("Tool call `{tool}` was not executed: {e}"),
                "budget_exhausted",
            )),
        }
    }

    /// A hook renamed an admitted call from `from` to `to`: within `to`'s per-tool
    /// budgets its charge moves there, or why it must not run.
    pub(super) fn retarget_tool_budget(
        &self,
        from: &str,
        to: &str,
    ) -> Option<(String, &'static str)> {
        let ledgers = self.ledgers.as_ref()?;
        match ledgers.own.retarget_tool_call(from, to) {
            Ok(()) => None,
            Err(e) => Some((
                format!("Tool call `{to}` (renamed from `{from}` by a hook) was not executed: {e}"),
                "budget_exhausted",
            )),
        }
    }

    /// The wall-clock check at a safe point: `true` (the reason kept) when the call
    /// must stop.
    pub(super) fn out_of_time(&mut self) -> bool {
        let Some(ledgers) = &self.ledgers else {
            return false;
        };
        match ledgers.own.check_time() {
            Ok(()) => false,
            Err(e) => {
                self.exhausted = Some(Box::new(e));
                true
            }
        }
    }

    /// Ends the call on the budget that ran out: a decision, the reply naming the budget
    /// (stored, so the session shows why it stopped), `PostCall`.
    pub(super) async fn stop_for_budget(
        &mut self,
        memory: &mut CallMemory,
    ) -> Result<CallOutcome, Error> {
        let Some(e) = self.exhausted.take().map(|e| *e) else {
            return Err(Error::internal("a budget stop without a budget"));
        };
        memory.repair(&format!("not executed: {e}"));
        self.note_budget(&e);
        let mut reply = Msg::assistant(format!("Stopped: {e}.")).synthetic();
        reply.metadata.insert(
            BUDGET_KEY.to_owned(),
            serde_json::to_value(&e).unwrap_or(Value::Null),
        );
        memory.push(reply.clone());
        memory.disarm();
        emit(self.sink, || AgentEvent::BudgetExhausted(e.clone()));
        self.finish(reply, StopReason::BudgetExhausted).await
    }

    fn note_budget(&self, e: &BudgetExhausted) {
        tracing::info!(target: "rein::budget", agent = %self.agent.info.name, "{e}");
        if !self.meta.mode.on {
            return;
        }
        let scope = serde_json::to_value(&e.scope).unwrap_or(Value::Null);
        let kind = serde_json::to_value(&e.kind).unwrap_or(Value::Null);
        let d = Decision {
            hook: "<runtime>".to_owned(),
            priority: 0,
            event: EventKind::PreReasoning,
            kind: DecisionKind::BudgetExhausted,
            field: "budget",
            before: format!("{scope} {kind}"),
            after: format!("{} of {}", e.used, e.limit),
            reason: Some(e.to_string()),
            agent_id: self.agent.info.id.clone(),
            tool_call_id: None,
            agent_path: self.agent.info.name.clone(),
            changes: Vec::new(),
        };
        self.keep_runtime(d);
    }

    /// Writes what the session spent (and, `reserving`, what is in flight) onto the last
    /// assistant message and, `reserving`, saves it now (fenced under the lease).
    pub(super) async fn save_session_record(
        &mut self,
        memory: &mut CallMemory,
        reserving: bool,
    ) -> Result<(), Error> {
        let Some(session) = self.ledgers.as_ref().and_then(|l| l.session.clone()) else {
            return Ok(());
        };
        let (spent, reserved) = session.spent_with_reserved();
        let record = if reserving {
            session_record(&spent, &reserved)
        } else {
            session_record(&spent, &Spend::default())
        };
        if memory.messages().is_empty() {
            return Ok(());
        }
        memory.set_budget_record(record);
        if reserving {
            memory.checkpoint().await.map_err(Error::store)?;
        }
        Ok(())
    }

    /// At the end of the call: the session's time and record; what the call spent (by
    /// agent) and what is left, into `outcome` and its reply's [`SPEND_KEY`] record.
    pub(super) fn close_budgets(
        &mut self,
        memory: &mut CallMemory,
        outcome: Option<&mut CallOutcome>,
    ) {
        let Some(ledgers) = self.ledgers.as_ref() else {
            return;
        };
        if let Some(session) = &ledgers.session {
            session.close_time();
            let record = session_record(&session.spent(), &Spend::default());
            memory.set_budget_record(record);
        }
        let Some(outcome) = outcome else {
            return;
        };
        let spend = ledgers.own.spent();
        let remaining = ledgers.own.remaining();
        outcome
            .reply
            .metadata
            .insert(SPEND_KEY.to_owned(), spend_record(&spend, &remaining));
        outcome.spend_by_agent = ledgers.own.spent_by_agent();
        outcome.spend = Some(spend);
        outcome.remaining = Some(Box::new(remaining));
    }
}

/// The bytes of text a request sends: every message's text, thinking, tool calls and
/// results, and the tool schemas, counted without serializing (the check runs before
/// every model call).
pub(super) fn request_bytes(request: &ModelRequest) -> usize {
    request.messages.iter().map(message_bytes).sum::<usize>() + schema_bytes(&request.tools)
}

/// The bytes of text in `tools`' names, descriptions and parameter schemas.
fn schema_bytes(tools: &[ToolSchema]) -> usize {
    tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + json_bytes(&t.parameters))
        .sum()
}

/// The bytes of text in `msg` (see [`request_bytes`]).
pub(super) fn message_bytes(msg: &Msg) -> usize {
    msg.content
        .iter()
        .map(|b| match b {
            ContentBlock::Text(t) => t.len(),
            ContentBlock::Thinking(t) => t.text.len(),
            ContentBlock::ToolUse(u) => u.name.len() + json_bytes(&u.input),
            ContentBlock::ToolResult(r) => r.name.len() + r.content.len(),
        })
        .sum::<usize>()
        + 4
}

/// About the length of `v`'s JSON text: strings and keys with their quotes, numbers as
/// a few bytes, one byte of punctuation per item; allocation-free. Values deeper than
/// stored values may be (`store::MAX_STORED_DEPTH`) count only their outer levels.
fn json_bytes(v: &serde_json::Value) -> usize {
    fn walk(v: &serde_json::Value, depth: usize) -> usize {
        use serde_json::Value;
        if depth > 128 {
            return 0;
        }
        match v {
            Value::Null | Value::Bool(_) => 5,
            Value::Number(_) => 8,
            Value::String(s) => s.len() + 3,
            Value::Array(a) => 2 + a.iter().map(|v| walk(v, depth + 1)).sum::<usize>(),
            Value::Object(o) => {
                2 + o
                    .iter()
                    .map(|(k, v)| k.len() + 4 + walk(v, depth + 1))
                    .sum::<usize>()
            }
        }
    }
    walk(v, 0)
}

impl Call<'_> {
    /// The model's own count of `request`'s prompt tokens, when it offers one and the
    /// count succeeds (a failed count is logged; the caller keeps its estimate).
    pub(super) async fn count_tokens(&self, request: &ModelRequest) -> Option<u64> {
        let count = self.agent.model.count_tokens(request)?;
        match count.await {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(
                    target: "rein::budget",
                    model = self.agent.model.name(),
                    error = %e,
                    "the model could not count the request's tokens: the estimate decides"
                );
                None
            }
        }
    }
}

/// Admits a model request against a user's stored budget record (see
/// [`UserBook`]): mirrors the record into the user's ledger, admits the
/// request on the whole chain, and saves the reservation over the version read; a save
/// that lost to another replica's takes the reservation back and tries again.
async fn reserve_for_user(
    ledger: &Arc<Ledger>,
    book: &UserBook,
    mirror: &Ledger,
    estimate: u64,
    max_tokens: Option<u32>,
    price: Option<&crate::budget::ModelPrice>,
) -> Result<Result<Option<u32>, BudgetExhausted>, Error> {
    let mut attempt = 0;
    loop {
        let at = book.read().await.map_err(Error::store)?;
        mirror.mirror(&at.spent, &at.reserved);
        let cap = match ledger.admit_model_call(estimate, max_tokens, price) {
            Ok(cap) => cap,
            Err(e) => return Ok(Err(e)),
        };
        let worst = Ledger::worst_case(estimate, cap, price);
        let mut reserved = at.reserved.clone();
        reserved.add(&worst);
        let saved = book.write(&at, &at.spent, &reserved).await;
        match saved {
            Ok(true) => return Ok(Ok(cap)),
            Ok(false) => {
                ledger.cancel_model_call(&worst);
                if !book.retry(attempt).await {
                    return Err(Error::store(book.contended()));
                }
                attempt += 1;
            }
            Err(e) => {
                ledger.cancel_model_call(&worst);
                return Err(Error::store(e));
            }
        }
    }
}
