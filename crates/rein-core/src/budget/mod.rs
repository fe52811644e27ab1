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
//!   budget is spent, and the call goes on. A call a `PreActing` hook renames is checked
//!   again after the hooks, against the per-tool budget of the tool it became (and
//!   charged to it), so a rename cannot run a tool past its budget.
//! - **Time.** The wall-clock budget is checked at the loop's safe points (before every
//!   model call and every tool batch): the call ends at the first one past the budget.
//!
//! When a model call cannot be made the call ends with
//! [`StopReason::BudgetExhausted`](crate::StopReason::BudgetExhausted): the reply names
//! the budget under [`BUDGET_KEY`] in its metadata, the decision trail records a
//! `BudgetExhausted` decision, and no model or tool call happens after it.
//!
//! **The bound.** Output tokens never exceed a budget for a model that honours
//! `max_tokens`. Input tokens are estimated before the request as the bytes of its text
//! (messages, tool calls and results, tool schemas) divided by [`BYTES_PER_TOKEN`],
//! rounded up; the provider's count is charged after. The estimate can be wrong either
//! way (a chat template adds tokens the text does not show; other scripts take more
//! tokens per byte), so where it matters the provider is asked: when a request with
//! [`COUNT_MARGIN`] times its estimate plus [`COUNT_SLACK`] tokens would be refused by an
//! input, total or cost budget, and the model counts tokens
//! ([`Model::count_tokens`](crate::Model::count_tokens)), the request is admitted (or
//! refused) and its `max_tokens` lowered on the provider's exact count. Hence: with a
//! counting model, an input, total or cost budget is exceeded only by a request whose
//! input is more than [`COUNT_MARGIN`] times its estimate plus [`COUNT_SLACK`]; with a
//! model that cannot count (or whose count failed), only by the last request's input
//! tokens beyond the estimate. Either way no further model call is made after it.
//! Model-call and tool-call budgets are never exceeded.
//!
//! # Session budgets across replicas
//! A session budget is kept with the session: what the session spent is stored in the
//! metadata of its last assistant message under [`BUDGET_KEY`] (in a session the model
//! has not answered yet, on its last message: the first call's input), saved (fenced
//! under a lease) with the conversation, so every replica sharing the store sees one
//! total; the newest record in the session is the one read. With a session budget, each
//! model request's worst case is reserved and saved *before* the request is sent, the
//! session's first request included, and replaced by the actual charge after: a replica
//! that crashes after the model answered leaves its reservation charged, never a lost
//! charge. The record is the runtime's: one in a call's input is removed on admission.
//!
//! # User budgets across sessions and replicas
//! A user budget ([`AgentBuilder::user_budget`](crate::AgentBuilder::user_budget)) caps
//! tokens, cost and model calls of everything one user (the call's
//! [`RunContext::user_id`](crate::RunContext::user_id); calls without one share the
//! anonymous user's) spends, in any session, on any replica sharing the session store.
//! Its record (`{"spent", "reserved"}`) is a one-message session of the user under the
//! reserved id [`USER_BUDGET_SESSION`], changed only by versioned saves: before a
//! request is sent, the runtime reads the record, checks the request's worst case
//! against what is left, and saves the reservation at the version it read — if another
//! replica saved first, it reads again and checks again. After the request, the
//! reservation is replaced by what it used the same way. The same bound as above holds
//! across replicas, and a replica that dies with a request in flight leaves its
//! reservation charged (never a lost charge; the record only over-counts). Each request
//! then costs two reads and two saves of the record.

use std::time::Duration;

use indexmap::IndexMap;
use serde::{Deserialize, Serialize};

/// Metadata key of the budget record: on a reply that stopped for a budget (the budget
/// that ran out: `{"kind", "scope", "limit", "used"}`), and on a session's last
/// assistant message (what the session spent: `{"spent": Spend, "reserved": Spend}`,
/// `reserved` only while a request is in flight; each [`Spend`] lists its non-zero
/// fields, and deserializes back whole since a missing field is zero).
pub const BUDGET_KEY: &str = "rein.budget";

/// Metadata key of what a call with budgets spent and has left, on the reply it returns
/// ([`CallOutcome::reply`](crate::CallOutcome::reply); not stored with the session):
/// `{"spent": Spend, "remaining": Budget}` — [`CallOutcome::spend`](crate::CallOutcome::spend)
/// and [`CallOutcome::remaining`](crate::CallOutcome::remaining) as JSON, with only the
/// non-zero fields of the spend and the limits that are set (a used-up limit is `0`).
/// Both deserialize back to the same values: a missing field is zero or unset.
pub const SPEND_KEY: &str = "rein.spend";

/// How many bytes of request text the pre-request estimate counts as one token (4: a
/// common average for English; text in other scripts may use more tokens per byte, which
/// the bound in the [module docs](self) accounts for).
pub const BYTES_PER_TOKEN: u64 = 4;

/// How far the estimate is trusted, with [`COUNT_SLACK`]: a request whose estimate
/// times this (2) plus the slack would be refused by an input, total or cost budget is
/// checked on the provider's count instead, where the model counts (see [the
/// bound](self#the-bound)). Requests further from every limit cost no counting round
/// trip.
pub const COUNT_MARGIN: u64 = 2;

/// The tokens a provider adds to every request that its text does not show (512): the
/// chat template's markup and the tool-use instructions it wraps around the tool
/// schemas (Qwen2.5's template: ~90 tokens for one tool; Anthropic documents a tool-use
/// system prompt of ~350). See [`COUNT_MARGIN`].
pub const COUNT_SLACK: u64 = 512;

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
    /// Tool calls admitted to run: a call a budget refuses is not charged; one a hook
    /// denies after admission stays charged.
    pub tool_calls: Option<u64>,
    /// Tool calls of one tool, by tool name (a call a hook renames counts for the tool
    /// it became).
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

impl Budget {
    /// Checks a user budget ([`AgentBuilder::user_budget`](crate::AgentBuilder::user_budget)):
    /// as [`Budget::validate`], and only the limits a user budget keeps (tokens, cost,
    /// model calls).
    ///
    /// # Errors
    /// The name of the first invalid or unsupported limit (`where_` prefixes it).
    pub fn validate_user(&self, where_: &str) -> Result<(), String> {
        self.validate(where_)?;
        let per_call = [
            ("tool_calls", self.tool_calls.is_some()),
            ("tool_calls_per_tool", !self.tool_calls_per_tool.is_empty()),
            ("wall_clock_ms", self.wall_clock_ms.is_some()),
        ];
        match per_call.iter().find(|(_, set)| *set) {
            Some((name, _)) => Err(format!(
                "`{where_}.{name}`: a user budget limits tokens, cost and model calls; limit \
                 tool calls and time with a call or session budget"
            )),
            None => Ok(()),
        }
    }
}

/// The price of one model, per million tokens, in your currency unit.
///
/// Cached prompt tokens ([`Usage::cached_input_tokens`](crate::Usage::cached_input_tokens)) are priced at
/// [`ModelPrice::cached_input_per_mtok`] and reasoning tokens
/// ([`Usage::reasoning_tokens`](crate::Usage::reasoning_tokens)) at [`ModelPrice::reasoning_per_mtok`] when set, else at
/// the input and output prices. Before a request is sent its tokens are not known to be
/// cached or reasoning, so the budget check prices them at the dearer of the two rates.
/// Cache *writes* (Anthropic `cache_creation_input_tokens`) are prompt tokens at the
/// input price.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct ModelPrice {
    /// Per million prompt tokens.
    pub input_per_mtok: f64,
    /// Per million generated tokens.
    pub output_per_mtok: f64,
    /// Per million prompt tokens read from the provider's cache (default: the input
    /// price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cached_input_per_mtok: Option<f64>,
    /// Per million reasoning tokens (default: the output price).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_per_mtok: Option<f64>,
}

impl ModelPrice {
    /// A price per million prompt and per million generated tokens.
    pub fn new(input_per_mtok: f64, output_per_mtok: f64) -> Self {
        Self {
            input_per_mtok,
            output_per_mtok,
            cached_input_per_mtok: None,
            reasoning_per_mtok: None,
        }
    }

    /// Prices cached prompt tokens at `per_mtok` per million.
    #[must_use]
    pub fn cached_input(mut self, per_mtok: f64) -> Self {
        self.cached_input_per_mtok = Some(per_mtok);
        self
    }

    /// Prices reasoning tokens at `per_mtok` per million.
    #[must_use]
    pub fn reasoning(mut self, per_mtok: f64) -> Self {
        self.reasoning_per_mtok = Some(per_mtok);
        self
    }

    /// What `input` prompt tokens (`cached_input` of them read from the cache) and
    /// `output` generated tokens (`reasoning` of them spent reasoning) cost at this
    /// price, each at its rate. Cached and reasoning counts above the totals they belong
    /// to are taken as the totals (the counts come from providers).
    pub fn cost(&self, input: u64, cached_input: u64, output: u64, reasoning: u64) -> f64 {
        let cached = cached_input.min(input);
        let reasoning = reasoning.min(output);
        ((input - cached) as f64 * self.input_per_mtok
            + cached as f64 * self.cached_input_per_mtok.unwrap_or(self.input_per_mtok)
            + (output - reasoning) as f64 * self.output_per_mtok
            + reasoning as f64 * self.reasoning_per_mtok.unwrap_or(self.output_per_mtok))
            / 1e6
    }

    /// The most `input` prompt and `output` generated tokens can cost, whichever of
    /// them turn out cached or reasoning (what a budget reserves before a request).
    pub(crate) fn worst_cost(&self, input: u64, output: u64) -> f64 {
        let input_rate = self
            .input_per_mtok
            .max(self.cached_input_per_mtok.unwrap_or(0.0));
        let output_rate = self
            .output_per_mtok
            .max(self.reasoning_per_mtok.unwrap_or(0.0));
        (input as f64 * input_rate + output as f64 * output_rate) / 1e6
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
            let optional = [
                ("cached_input_per_mtok", p.cached_input_per_mtok),
                ("reasoning_per_mtok", p.reasoning_per_mtok),
            ];
            let set = optional
                .into_iter()
                .filter_map(|(field, v)| v.map(|v| (field, v)));
            let fields = [
                ("input_per_mtok", p.input_per_mtok),
                ("output_per_mtok", p.output_per_mtok),
            ];
            for (field, v) in fields.into_iter().chain(set) {
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
    /// Of the prompt tokens, those the provider read from its cache.
    pub cached_input_tokens: u64,
    /// Of the generated tokens, those spent reasoning.
    pub reasoning_tokens: u64,
    /// Cost, in the unit of the agent's [`Prices`] (0 without prices).
    pub cost: f64,
    /// Model calls.
    pub model_calls: u64,
    /// Tool calls admitted to run (those a hook then denied included).
    pub tool_calls: u64,
    /// Tool calls by tool name, for the tools a budget of the call limits
    /// ([`Budget::tool_calls_of`]).
    pub tool_calls_per_tool: IndexMap<String, u64>,
    /// Wall-clock time in milliseconds.
    pub wall_clock_ms: u64,
}

impl Spend {
    /// Adds `other` to this spend.
    pub(crate) fn add(&mut self, other: &Spend) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_add(other.cached_input_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_add(other.reasoning_tokens);
        self.cost += other.cost;
        self.model_calls = self.model_calls.saturating_add(other.model_calls);
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        for (tool, n) in &other.tool_calls_per_tool {
            match self.tool_calls_per_tool.get_mut(tool) {
                Some(e) => *e = e.saturating_add(*n),
                None => {
                    self.tool_calls_per_tool.insert(tool.clone(), *n);
                }
            }
        }
        self.wall_clock_ms = self.wall_clock_ms.saturating_add(other.wall_clock_ms);
    }

    /// One tool call of `tool` (counted per tool when `per_tool`).
    fn add_tool_call(&mut self, tool: &str, per_tool: bool) {
        self.tool_calls = self.tool_calls.saturating_add(1);
        if per_tool {
            match self.tool_calls_per_tool.get_mut(tool) {
                Some(n) => *n = n.saturating_add(1),
                None => {
                    self.tool_calls_per_tool.insert(tool.to_owned(), 1);
                }
            }
        }
    }

    /// Moves one tool call's per-tool count from `from` (when counted there) to `to`
    /// (when counted there).
    fn move_tool_call(&mut self, from: &str, to: &str, was: bool, now: bool) {
        if was && let Some(n) = self.tool_calls_per_tool.get_mut(from) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.tool_calls_per_tool.shift_remove(from);
            }
        }
        if now {
            match self.tool_calls_per_tool.get_mut(to) {
                Some(n) => *n = n.saturating_add(1),
                None => {
                    self.tool_calls_per_tool.insert(to.to_owned(), 1);
                }
            }
        }
    }

    /// Takes `other` (a part of this spend) out of it, never below zero.
    pub(crate) fn subtract(&mut self, other: &Spend) {
        self.input_tokens = self.input_tokens.saturating_sub(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_sub(other.output_tokens);
        self.cached_input_tokens = self
            .cached_input_tokens
            .saturating_sub(other.cached_input_tokens);
        self.reasoning_tokens = self.reasoning_tokens.saturating_sub(other.reasoning_tokens);
        self.cost = (self.cost - other.cost).max(0.0);
        self.model_calls = self.model_calls.saturating_sub(other.model_calls);
        self.tool_calls = self.tool_calls.saturating_sub(other.tool_calls);
        for (tool, n) in &other.tool_calls_per_tool {
            if let Some(e) = self.tool_calls_per_tool.get_mut(tool) {
                *e = e.saturating_sub(*n);
            }
        }
        self.tool_calls_per_tool.retain(|_, n| *n > 0);
        // Wall clock is each call's own, not a sum of its parts.
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
    /// The budget of the call's user (or tenant) across all its sessions and every
    /// replica sharing the store ([`AgentBuilder::user_budget`](crate::AgentBuilder::user_budget)).
    User,
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
            BudgetScope::User => "the user".to_owned(),
        };
        write!(
            f,
            "the {kind} budget of {scope} is spent: {} of {}",
            self.used, self.limit
        )
    }
}

mod ledger;

mod record;

pub(crate) use ledger::{Ledger, Tokens, estimate_tokens, worst_estimate};
pub(crate) use record::{session_record, spend_record, stored_spend};

/// The session id under which a user's budget record is stored, next to the user's
/// sessions ([`AgentBuilder::user_budget`](crate::AgentBuilder::user_budget)): reserved
/// by rein, never a conversation.
pub const USER_BUDGET_SESSION: &str = "rein.user-budget";
