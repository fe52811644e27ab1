//! Budgets: what calls may spend, enforced before the spending.
//!
//! A [`Budget`] caps tokens (input, output, total), cost (from a [`Prices`] table you
//! supply), model calls, tool calls (in total and per tool) and wall-clock time. An agent
//! takes one per call ([`AgentBuilder::call_budget`](crate::AgentBuilder::call_budget))
//! and one per session ([`AgentBuilder::session_budget`](crate::AgentBuilder::session_budget)),
//! and a subagent declaration may give its child a smaller slice
//! ([`SubagentDeclarationBuilder::budget`](crate::SubagentDeclarationBuilder::budget)).
//!
//! # How a budget holds
//! Every model call and tool call of a call — its subagents' included — is charged to
//! every budget above it: the call's, the session's and, inside a subagent, each slice
//! on the way down. A child therefore draws from what its parent has *left*, never from
//! a fresh copy. Before spending, the runtime checks what is left:
//!
//! - **Model calls.** A request is not sent when a model-call budget is used up, or when
//!   its input alone (estimated as below) would exceed what is left of an input, total or
//!   cost budget. Otherwise its `max_tokens` is lowered to what is left of the output and
//!   total budgets and to what the cost left pays for after the input.
//! - **Tool calls** past a tool-call budget (in total or for that tool) are refused at
//!   admission, before any hook sees them: the model reads an error result saying the
//!   budget is spent, and the call goes on.
//! - **Time.** The wall-clock budget is checked at the loop's safe points (before every
//!   model call and every tool batch): the call ends at the first one past the budget.
//!
//! When a model call cannot be made the call ends with
//! [`StopReason::BudgetExhausted`](crate::StopReason::BudgetExhausted): the reply names
//! the budget under [`BUDGET_KEY`] in its metadata, the decision trail records a
//! `BudgetExhausted` decision, and no model or tool call happens after it.
//!
//! **The bound.** Output tokens never exceed a budget for a model that honours
//! `max_tokens`. Input tokens are estimated before the request as the request's text
//! bytes divided by [`BYTES_PER_TOKEN`], rounded up; the provider's count is charged
//! after. An input, total or cost budget can therefore be exceeded only by the last
//! request's input tokens beyond that estimate — and then no further model call is made.
//! Model-call and tool-call budgets are never exceeded.
//!
//! # Session budgets across replicas
//! A session budget is kept with the session: what the session spent is stored in the
//! metadata of its last assistant message under [`BUDGET_KEY`], saved (fenced under a
//! lease) with the conversation, so every replica sharing the store sees one total. With
//! a session budget, each model request's worst case is reserved and saved *before* the
//! request is sent, and replaced by the actual charge after: a replica that crashes after
//! the model answered leaves its reservation charged, never a lost charge. (The very
//! first model call of a session has no stored assistant message to carry its
//! reservation; its charge is saved with its answer.)

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// Metadata key of the budget record: on a reply that stopped for a budget (the budget
/// that ran out: `{"kind", "scope", "limit", "used"}`), and on a session's last
/// assistant message (what the session spent: `{"spent": {...}, "reserved": {...}}`).
pub const BUDGET_KEY: &str = "rein.budget";

/// How many bytes of request text the pre-request estimate counts as one token (4: a
/// common average for English; text in other scripts may use more tokens per byte, which
/// the bound in the [module docs](self) accounts for).
pub const BYTES_PER_TOKEN: u64 = 4;

/// Limits on what calls may spend (see the [module docs](self)). Every limit is
/// optional; an unset one does not limit. `#[non_exhaustive]`: start from
/// [`Budget::new`] and chain the setters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Budget {
    /// Prompt tokens, summed over model calls.
    pub input_tokens: Option<u64>,
    /// Generated tokens, summed over model calls.
    pub output_tokens: Option<u64>,
    /// Prompt and generated tokens together.
    pub total_tokens: Option<u64>,
    /// Cost in the unit of the agent's [`Prices`] (needs a price for every model used).
    pub cost: Option<f64>,
    /// Model calls (reasoning and summary requests).
    pub model_calls: Option<u64>,
    /// Tool calls that run (refused calls are not charged).
    pub tool_calls: Option<u64>,
    /// Tool calls of one tool, by tool name.
    pub tool_calls_per_tool: IndexMap<String, u64>,
    /// Wall-clock time, in milliseconds (a session budget sums its calls' time).
    pub wall_clock_ms: Option<u64>,
}

impl Budget {
    /// A budget that limits nothing yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Caps prompt tokens.
    pub fn input_tokens(mut self, n: u64) -> Self {
        self.input_tokens = Some(n);
        self
    }

    /// Caps generated tokens.
    pub fn output_tokens(mut self, n: u64) -> Self {
        self.output_tokens = Some(n);
        self
    }

    /// Caps prompt and generated tokens together.
    pub fn total_tokens(mut self, n: u64) -> Self {
        self.total_tokens = Some(n);
        self
    }

    /// Caps cost, in the unit of the agent's [`Prices`].
    pub fn cost(mut self, amount: f64) -> Self {
        self.cost = Some(amount);
        self
    }

    /// Caps model calls.
    pub fn model_calls(mut self, n: u64) -> Self {
        self.model_calls = Some(n);
        self
    }

    /// Caps tool calls, all tools together.
    pub fn tool_calls(mut self, n: u64) -> Self {
        self.tool_calls = Some(n);
        self
    }

    /// Caps the calls of one tool.
    pub fn tool_calls_of(mut self, tool: impl Into<String>, n: u64) -> Self {
        self.tool_calls_per_tool.insert(tool.into(), n);
        self
    }

    /// Caps wall-clock time.
    pub fn wall_clock(mut self, d: Duration) -> Self {
        self.wall_clock_ms = Some(u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        self
    }

    /// Whether no limit is set.
    pub fn is_unlimited(&self) -> bool {
        *self == Self::default()
    }

    /// Checks the limits: every one set is greater than zero, and a cost is finite.
    ///
    /// # Errors
    /// The name of the first invalid limit and why (`where_` prefixes it, e.g.
    /// `call_budget`), for a build error.
    pub fn validate(&self, where_: &str) -> Result<(), String> {
        let counts = [
            ("input_tokens", self.input_tokens),
            ("output_tokens", self.output_tokens),
            ("total_tokens", self.total_tokens),
            ("model_calls", self.model_calls),
            ("tool_calls", self.tool_calls),
            ("wall_clock_ms", self.wall_clock_ms),
        ];
        for (name, v) in counts {
            if v == Some(0) {
                return Err(format!("`{where_}.{name}` must be greater than zero"));
            }
        }
        for (tool, n) in &self.tool_calls_per_tool {
            if *n == 0 {
                return Err(format!(
                    "`{where_}.tool_calls_per_tool.{tool}` must be greater than zero"
                ));
            }
        }
        if let Some(c) = self.cost
            && !(c.is_finite() && c > 0.0)
        {
            return Err(format!(
                "`{where_}.cost` must be a finite amount greater than zero, not {c}"
            ));
        }
        Ok(())
    }
}

/// The price of one model, per million tokens, in your currency unit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ModelPrice {
    /// Per million prompt tokens.
    pub input_per_mtok: f64,
    /// Per million generated tokens.
    pub output_per_mtok: f64,
}

impl ModelPrice {
    /// A price per million prompt and per million generated tokens.
    pub fn new(input_per_mtok: f64, output_per_mtok: f64) -> Self {
        Self {
            input_per_mtok,
            output_per_mtok,
        }
    }

    fn cost(&self, input: u64, output: u64) -> f64 {
        (input as f64 * self.input_per_mtok + output as f64 * self.output_per_mtok) / 1e6
    }
}

/// Model prices by model name (the name a request is sent with: its options' `model`, or
/// the model's [`Model::name`](crate::Model::name)). A cost budget needs a price for every
/// model its agent (and its subagents) use: building fails otherwise.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Prices(pub IndexMap<String, ModelPrice>);

impl Prices {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) the price of `model`.
    pub fn model(mut self, model: impl Into<String>, price: ModelPrice) -> Self {
        self.0.insert(model.into(), price);
        self
    }

    /// The price of `model`, if listed.
    pub fn get(&self, model: &str) -> Option<&ModelPrice> {
        self.0.get(model)
    }

    /// Checks every price: finite and not negative.
    ///
    /// # Errors
    /// The model and field that is invalid.
    pub fn validate(&self) -> Result<(), String> {
        for (model, p) in &self.0 {
            for (field, v) in [
                ("input_per_mtok", p.input_per_mtok),
                ("output_per_mtok", p.output_per_mtok),
            ] {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(format!(
                        "`prices.{model}.{field}` must be a finite amount of at least zero, not {v}"
                    ));
                }
            }
        }
        Ok(())
    }
}

/// What was spent: tokens, cost, calls and time.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
#[non_exhaustive]
pub struct Spend {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Cost, in the unit of the agent's [`Prices`] (0 without prices).
    pub cost: f64,
    /// Model calls.
    pub model_calls: u64,
    /// Tool calls that ran.
    pub tool_calls: u64,
    /// Tool calls by tool name.
    pub tool_calls_per_tool: IndexMap<String, u64>,
    /// Wall-clock time in milliseconds.
    pub wall_clock_ms: u64,
}

impl Spend {
    fn add(&mut self, other: &Spend) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cost += other.cost;
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        for (tool, n) in &other.tool_calls_per_tool {
            let e = self.tool_calls_per_tool.entry(tool.clone()).or_insert(0);
            *e = e.saturating_add(*n);
        }
        self.wall_clock_ms = self.wall_clock_ms.saturating_add(other.wall_clock_ms);
    }
}

/// Which limit of a [`Budget`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetKind {
    /// [`Budget::input_tokens`].
    InputTokens,
    /// [`Budget::output_tokens`].
    OutputTokens,
    /// [`Budget::total_tokens`].
    TotalTokens,
    /// [`Budget::cost`].
    Cost,
    /// [`Budget::model_calls`].
    ModelCalls,
    /// [`Budget::tool_calls`].
    ToolCalls,
    /// [`Budget::tool_calls_per_tool`] for this tool.
    ToolCallsOf(String),
    /// [`Budget::wall_clock_ms`].
    WallClock,
}

/// Which budget: the call's, the session's, or a subagent's slice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetScope {
    /// The budget of one call ([`AgentBuilder::call_budget`](crate::AgentBuilder::call_budget)).
    Call,
    /// The budget of the session, across calls and replicas.
    Session,
    /// A subagent's slice, by its agent path (e.g. `support/billing`).
    Subagent(String),
}

/// A budget that ran out: which one, its limit and what was used (or would have been).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct BudgetExhausted {
    /// The limit.
    pub kind: BudgetKind,
    /// The budget it belongs to.
    pub scope: BudgetScope,
    /// The limit's value (tokens, calls, milliseconds or cost).
    pub limit: f64,
    /// What was used when the check failed (for a request refused on its estimate: the
    /// amount used plus the estimate).
    pub used: f64,
}

impl std::fmt::Display for BudgetExhausted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &self.kind {
            BudgetKind::InputTokens => "input-token".to_owned(),
            BudgetKind::OutputTokens => "output-token".to_owned(),
            BudgetKind::TotalTokens => "total-token".to_owned(),
            BudgetKind::Cost => "cost".to_owned(),
            BudgetKind::ModelCalls => "model-call".to_owned(),
            BudgetKind::ToolCalls => "tool-call".to_owned(),
            BudgetKind::ToolCallsOf(t) => format!("`{t}` tool-call"),
            BudgetKind::WallClock => "wall-clock (ms)".to_owned(),
        };
        let scope = match &self.scope {
            BudgetScope::Call => "the call".to_owned(),
            BudgetScope::Session => "the session".to_owned(),
            BudgetScope::Subagent(p) => format!("subagent `{p}`"),
        };
        write!(
            f,
            "the {kind} budget of {scope} is spent: {} of {}",
            self.used, self.limit
        )
    }
}

/// One budget being drawn from: its limits, what it spent, and the budget above it.
#[derive(Debug)]
pub(crate) struct Ledger {
    scope: BudgetScope,
    limits: Budget,
    state: Mutex<LedgerState>,
    parent: Option<Arc<Ledger>>,
    started: Instant,
}

#[derive(Debug, Default)]
struct LedgerState {
    spent: Spend,
    /// What a model request in flight may still spend (charged when it is settled).
    reserved: Spend,
}

impl Ledger {
    /// A ledger for `limits` that has already spent `spent` (a session's stored total).
    pub(crate) fn new(
        scope: BudgetScope,
        limits: Budget,
        spent: Spend,
        parent: Option<Arc<Ledger>>,
    ) -> Arc<Self> {
        Arc::new(Self {
            scope,
            limits,
            state: Mutex::new(LedgerState {
                spent,
                reserved: Spend::default(),
            }),
            parent,
            started: Instant::now(),
        })
    }

    fn chain(self: &Arc<Self>) -> impl Iterator<Item = &Ledger> {
        std::iter::successors(Some(&**self), |l| l.parent.as_deref())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LedgerState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What this ledger spent, reservations included (what a crash would leave
    /// charged).
    pub(crate) fn spent_with_reserved(&self) -> (Spend, Spend) {
        let s = self.lock();
        (s.spent.clone(), s.reserved.clone())
    }

    /// What this ledger spent (settled charges).
    pub(crate) fn spent(&self) -> Spend {
        self.lock().spent.clone()
    }

    fn elapsed_ms(&self, base: u64) -> u64 {
        base.saturating_add(u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX))
    }

    /// The wall-clock check at a safe point, over the whole chain.
    pub(crate) fn check_time(self: &Arc<Self>) -> Result<(), BudgetExhausted> {
        for l in self.chain() {
            if let Some(limit) = l.limits.wall_clock_ms {
                let used = l.elapsed_ms(l.lock().spent.wall_clock_ms);
                if used >= limit {
                    return Err(l.exhausted(BudgetKind::WallClock, limit as f64, used as f64));
                }
            }
        }
        Ok(())
    }

    fn exhausted(&self, kind: BudgetKind, limit: f64, used: f64) -> BudgetExhausted {
        BudgetExhausted {
            kind,
            scope: self.scope.clone(),
            limit,
            used,
        }
    }

    /// Admits one model request estimated at `input` prompt tokens with `max_tokens`
    /// (the request's own cap, if any), priced at `price`: the cap the request is sent
    /// with (lowered to what every budget on the chain leaves), with the request's worst
    /// case reserved on every ledger, or the budget that refuses it.
    pub(crate) fn admit_model_call(
        self: &Arc<Self>,
        input: u64,
        max_tokens: Option<u32>,
        price: Option<&ModelPrice>,
    ) -> Result<Option<u32>, BudgetExhausted> {
        let mut cap: Option<u64> = max_tokens.map(u64::from);
        for l in self.chain() {
            let s = l.lock();
            let used = |a: u64, b: u64| a.saturating_add(b);
            let b = &l.limits;
            if let Some(limit) = b.model_calls {
                let n = used(s.spent.model_calls, s.reserved.model_calls);
                if n >= limit {
                    return Err(l.exhausted(BudgetKind::ModelCalls, limit as f64, n as f64));
                }
            }
            let in_used = used(s.spent.input_tokens, s.reserved.input_tokens);
            let out_used = used(s.spent.output_tokens, s.reserved.output_tokens);
            if let Some(limit) = b.input_tokens
                && in_used.saturating_add(input) > limit
            {
                return Err(l.exhausted(
                    BudgetKind::InputTokens,
                    limit as f64,
                    in_used.saturating_add(input) as f64,
                ));
            }
            if let Some(limit) = b.output_tokens {
                let left = limit.saturating_sub(out_used);
                if left == 0 {
                    return Err(l.exhausted(
                        BudgetKind::OutputTokens,
                        limit as f64,
                        out_used as f64,
                    ));
                }
                cap = Some(cap.map_or(left, |c| c.min(left)));
            }
            if let Some(limit) = b.total_tokens {
                let total = in_used.saturating_add(out_used).saturating_add(input);
                let left = limit.saturating_sub(total);
                if left == 0 {
                    return Err(l.exhausted(BudgetKind::TotalTokens, limit as f64, total as f64));
                }
                cap = Some(cap.map_or(left, |c| c.min(left)));
            }
            if let Some(limit) = b.cost {
                let spent = s.spent.cost + s.reserved.cost;
                let p = price.copied().unwrap_or_default();
                let after_input = limit - spent - p.cost(input, 0);
                let out_cost = p.cost(0, 1);
                if after_input <= 0.0 || (out_cost > 0.0 && after_input < out_cost) {
                    return Err(l.exhausted(BudgetKind::Cost, limit, spent + p.cost(input, 1)));
                }
                if out_cost > 0.0 {
                    let left = (after_input / out_cost).floor() as u64;
                    cap = Some(cap.map_or(left, |c| c.min(left)));
                }
            }
        }
        let cap32 = cap.map(|c| u32::try_from(c).unwrap_or(u32::MAX));
        let worst = Spend {
            input_tokens: input,
            output_tokens: cap.unwrap_or(0),
            cost: price.map_or(0.0, |p| p.cost(input, cap.unwrap_or(0))),
            model_calls: 1,
            ..Spend::default()
        };
        for l in self.chain() {
            l.lock().reserved.add(&worst);
        }
        Ok(cap32)
    }

    /// Settles the request admitted with [`Ledger::admit_model_call`]: its reservation is
    /// replaced by what it used (`input`, `output` tokens as the provider counted them).
    pub(crate) fn settle_model_call(
        self: &Arc<Self>,
        input_est: u64,
        cap: Option<u32>,
        input: u64,
        output: u64,
        price: Option<&ModelPrice>,
    ) {
        let cap = cap.map_or(0, u64::from);
        for l in self.chain() {
            let mut s = l.lock();
            let r = &mut s.reserved;
            r.input_tokens = r.input_tokens.saturating_sub(input_est);
            r.output_tokens = r.output_tokens.saturating_sub(cap);
            r.cost -= price.map_or(0.0, |p| p.cost(input_est, cap));
            if r.cost < 1e-12 {
                r.cost = 0.0;
            }
            r.model_calls = r.model_calls.saturating_sub(1);
            let sp = &mut s.spent;
            sp.input_tokens = sp.input_tokens.saturating_add(input);
            sp.output_tokens = sp.output_tokens.saturating_add(output);
            sp.cost += price.map_or(0.0, |p| p.cost(input, output));
            sp.model_calls = sp.model_calls.saturating_add(1);
        }
    }

    /// Admits (and charges) one tool call of `tool`, or names the budget that refuses it.
    pub(crate) fn admit_tool_call(self: &Arc<Self>, tool: &str) -> Result<(), BudgetExhausted> {
        for l in self.chain() {
            let s = l.lock();
            if let Some(limit) = l.limits.tool_calls
                && s.spent.tool_calls >= limit
            {
                return Err(l.exhausted(
                    BudgetKind::ToolCalls,
                    limit as f64,
                    s.spent.tool_calls as f64,
                ));
            }
            if let Some(limit) = l.limits.tool_calls_per_tool.get(tool) {
                let n = s.spent.tool_calls_per_tool.get(tool).copied().unwrap_or(0);
                if n >= *limit {
                    return Err(l.exhausted(
                        BudgetKind::ToolCallsOf(tool.to_owned()),
                        *limit as f64,
                        n as f64,
                    ));
                }
            }
        }
        for l in self.chain() {
            let mut s = l.lock();
            s.spent.tool_calls = s.spent.tool_calls.saturating_add(1);
            let e = s
                .spent
                .tool_calls_per_tool
                .entry(tool.to_owned())
                .or_insert(0);
            *e = e.saturating_add(1);
        }
        Ok(())
    }

    /// Adds the time since this ledger started to what it spent (at the end of a call,
    /// for a session's cumulative wall clock).
    pub(crate) fn close_time(&self) {
        let mut s = self.lock();
        s.spent.wall_clock_ms = self.elapsed_ms(s.spent.wall_clock_ms);
    }
}

/// The pre-request estimate of a request's prompt tokens (see [`BYTES_PER_TOKEN`]).
pub(crate) fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// A session's stored record: what it spent and what was reserved (both count).
pub(crate) fn stored_spend(value: &serde_json::Value) -> Spend {
    let mut total: Spend = value
        .get("spent")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    if let Some(r) = value
        .get("reserved")
        .and_then(|v| serde_json::from_value::<Spend>(v.clone()).ok())
    {
        total.add(&r);
    }
    total
}

/// The session record of `spent` and `reserved`.
pub(crate) fn session_record(spent: &Spend, reserved: &Spend) -> serde_json::Value {
    serde_json::json!({ "spent": spent, "reserved": reserved })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(b: Budget) -> Arc<Ledger> {
        Ledger::new(BudgetScope::Call, b, Spend::default(), None)
    }

    #[test]
    fn a_request_is_capped_to_the_output_left_and_refused_once_it_is_spent() {
        let l = ledger(Budget::new().output_tokens(100));
        let cap = l.admit_model_call(10, Some(500), None).unwrap();
        assert_eq!(cap, Some(100));
        l.settle_model_call(10, cap, 12, 60, None);
        assert_eq!(l.admit_model_call(10, None, None).unwrap(), Some(40));
        l.settle_model_call(10, Some(40), 12, 40, None);
        let e = l.admit_model_call(10, None, None).unwrap_err();
        assert_eq!(e.kind, BudgetKind::OutputTokens);
    }

    #[test]
    fn a_child_draws_from_what_its_parent_has_left() {
        let parent = ledger(Budget::new().model_calls(3));
        parent.admit_model_call(1, None, None).unwrap();
        parent.settle_model_call(1, None, 1, 1, None);
        let child = Ledger::new(
            BudgetScope::Subagent("a/b".into()),
            Budget::new().model_calls(10),
            Spend::default(),
            Some(Arc::clone(&parent)),
        );
        for _ in 0..2 {
            let cap = child.admit_model_call(1, None, None).unwrap();
            child.settle_model_call(1, cap, 1, 1, None);
        }
        let e = child.admit_model_call(1, None, None).unwrap_err();
        assert_eq!(
            (e.kind, e.scope),
            (BudgetKind::ModelCalls, BudgetScope::Call)
        );
        assert_eq!(parent.spent().model_calls, 3);
    }

    #[test]
    fn the_cost_left_pays_for_the_output_cap_after_the_input() {
        let price = ModelPrice::new(1.0, 2.0); // per million
        let l = ledger(Budget::new().cost(0.001)); // 1,000 µ-units
        // 200 input tokens cost 0.0002; 0.0008 left pays 400 output tokens.
        let cap = l.admit_model_call(200, Some(10_000), Some(&price)).unwrap();
        assert_eq!(cap, Some(400));
        l.settle_model_call(200, cap, 200, 400, Some(&price));
        assert!(l.admit_model_call(1, None, Some(&price)).is_err());
    }

    #[test]
    fn zero_and_negative_limits_are_refused_by_name() {
        assert!(
            Budget::new()
                .model_calls(0)
                .validate("call_budget")
                .unwrap_err()
                .contains("call_budget.model_calls")
        );
        assert!(
            Budget::new()
                .cost(-1.0)
                .validate("b")
                .unwrap_err()
                .contains("b.cost")
        );
        assert!(
            Budget::new()
                .tool_calls_of("refund", 0)
                .validate("b")
                .unwrap_err()
                .contains("tool_calls_per_tool.refund")
        );
        assert!(Budget::new().cost(1.0).model_calls(2).validate("b").is_ok());
    }
}
