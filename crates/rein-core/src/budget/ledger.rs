//! The ledgers a call draws from: one per budget, chained to the budget above, so every
//! charge reaches every budget of the call, its session and the calls that delegated to
//! it.

use std::any::Any;
use std::sync::{Arc, Mutex, PoisonError};

use indexmap::IndexMap;
use tokio::time::Instant;

use super::{
    BYTES_PER_TOKEN, Budget, BudgetExhausted, BudgetKind, BudgetScope, COUNT_MARGIN, COUNT_SLACK,
    ModelPrice, Spend,
};

/// One budget being drawn from: its limits, what it spent, and the budget above it.
#[derive(Debug)]
pub(crate) struct Ledger {
    scope: BudgetScope,
    limits: Budget,
    state: Mutex<LedgerState>,
    parent: Option<Arc<Ledger>>,
    started: Instant,
    /// The agent path of the call drawing from this ledger (`support/billing`).
    agent: String,
    /// For a user's budget: the handle of its stored record, the truth this ledger
    /// mirrors. Opaque here (budgets sit below the store); the agent layer owns its type.
    book: Option<Arc<dyn Any + Send + Sync>>,
}

#[derive(Debug, Default)]
struct LedgerState {
    spent: Spend,
    /// What a model request in flight may still spend (charged when it is settled).
    reserved: Spend,
    /// Of `spent`, what the calls of other agents (subagents below) spent, by agent
    /// path; empty until one is charged (a call that does not delegate allocates
    /// nothing for it).
    by_agent: IndexMap<String, Spend>,
}

/// What one model request used, as the provider counted it (or as estimated).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Tokens {
    pub(crate) input: u64,
    pub(crate) cached_input: u64,
    pub(crate) output: u64,
    pub(crate) reasoning: u64,
}

impl Ledger {
    /// A ledger for `limits` that has already spent `spent` (a session's stored total),
    /// drawn from by the calls of `agent` (its agent path).
    pub(crate) fn new(
        scope: BudgetScope,
        limits: Budget,
        spent: Spend,
        parent: Option<Arc<Ledger>>,
        agent: String,
    ) -> Arc<Self> {
        Arc::new(Self {
            scope,
            limits,
            state: Mutex::new(LedgerState {
                spent,
                ..LedgerState::default()
            }),
            parent,
            started: Instant::now(),
            agent,
            book: None,
        })
    }

    /// The ledger of a user's budget, mirroring its stored record (`book`); the top of
    /// its chain.
    pub(crate) fn user(
        limits: Budget,
        book: Arc<dyn Any + Send + Sync>,
        agent: String,
    ) -> Arc<Self> {
        Arc::new(Self {
            scope: BudgetScope::User,
            limits,
            state: Mutex::new(LedgerState::default()),
            parent: None,
            started: Instant::now(),
            agent,
            book: Some(book),
        })
    }

    /// The handle of the user's budget record above this ledger (the type the agent
    /// layer gave [`Ledger::user`]), with that ledger, if a user budget applies.
    pub(crate) fn user_book<T: Any + Send + Sync>(self: &Arc<Self>) -> Option<(Arc<T>, &Ledger)> {
        self.chain().find_map(|l| {
            let book = Arc::clone(l.book.as_ref()?).downcast::<T>().ok()?;
            Some((book, l))
        })
    }

    /// Mirrors a user's stored record: everything spent or reserved by anyone, with
    /// this ledger's own reservations (already in the record) kept apart.
    pub(crate) fn mirror(&self, spent: &Spend, reserved: &Spend) {
        let mut s = self.lock();
        let mut total = spent.clone();
        total.add(reserved);
        total.subtract(&s.reserved);
        // Wall clock is not a sum of parts: a user's record keeps none.
        total.wall_clock_ms = 0;
        s.spent = total;
    }

    /// The agent path of the calls drawing from this ledger.
    pub(crate) fn agent(&self) -> &str {
        &self.agent
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

    /// What this ledger spent by agent path: its own agent's calls first, then each
    /// agent below that was charged, in the order they were first charged.
    pub(crate) fn spent_by_agent(&self) -> Vec<(String, Spend)> {
        let s = self.lock();
        let mut own = s.spent.clone();
        for other in s.by_agent.values() {
            own.subtract(other);
        }
        let mut out = Vec::with_capacity(1 + s.by_agent.len());
        out.push((self.agent.clone(), own));
        for (agent, spend) in &s.by_agent {
            out.push((agent.clone(), spend.clone()));
        }
        out
    }

    /// What the calls drawing from this ledger may still spend: for each limit set on
    /// this budget or any budget above it, the least left of it (reservations count
    /// as spent); wall clock from now.
    pub(crate) fn remaining(self: &Arc<Self>) -> Budget {
        fn least(slot: &mut Option<u64>, left: u64) {
            *slot = Some(slot.map_or(left, |v| v.min(left)));
        }
        let mut out = Budget::default();
        for l in self.chain() {
            let s = l.lock();
            let b = &l.limits;
            let used = |a: u64, r: u64| a.saturating_add(r);
            let input = used(s.spent.input_tokens, s.reserved.input_tokens);
            let output = used(s.spent.output_tokens, s.reserved.output_tokens);
            if let Some(limit) = b.input_tokens {
                least(&mut out.input_tokens, limit.saturating_sub(input));
            }
            if let Some(limit) = b.output_tokens {
                least(&mut out.output_tokens, limit.saturating_sub(output));
            }
            if let Some(limit) = b.total_tokens {
                least(
                    &mut out.total_tokens,
                    limit.saturating_sub(input.saturating_add(output)),
                );
            }
            if let Some(limit) = b.cost {
                let left = (limit - s.spent.cost - s.reserved.cost).max(0.0);
                out.cost = Some(out.cost.map_or(left, |v| v.min(left)));
            }
            if let Some(limit) = b.model_calls {
                let n = used(s.spent.model_calls, s.reserved.model_calls);
                least(&mut out.model_calls, limit.saturating_sub(n));
            }
            if let Some(limit) = b.tool_calls {
                least(
                    &mut out.tool_calls,
                    limit.saturating_sub(s.spent.tool_calls),
                );
            }
            for (tool, limit) in &b.tool_calls_per_tool {
                let n = s.spent.tool_calls_per_tool.get(tool).copied().unwrap_or(0);
                let left = limit.saturating_sub(n);
                let e = out.tool_calls_per_tool.entry(tool.clone()).or_insert(left);
                *e = (*e).min(left);
            }
            if let Some(limit) = b.wall_clock_ms {
                let elapsed = l.elapsed_ms(s.spent.wall_clock_ms);
                least(&mut out.wall_clock_ms, limit.saturating_sub(elapsed));
            }
        }
        out
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
        let cap32 = self.check_model_call(input, max_tokens, price)?;
        let worst = Self::worst_case(input, cap32, price);
        for l in self.chain() {
            l.lock().reserved.add(&worst);
        }
        Ok(cap32)
    }

    /// Whether a request estimated at `input` prompt tokens is close enough to a token or
    /// cost budget on the chain that the estimate could decide wrongly: one with
    /// [`COUNT_MARGIN`] times that input plus [`COUNT_SLACK`] would be refused by an
    /// input, total or cost budget. The agent then asks the provider for the exact count.
    pub(crate) fn near_input_limit(
        self: &Arc<Self>,
        input: u64,
        max_tokens: Option<u32>,
        price: Option<&ModelPrice>,
    ) -> bool {
        matches!(
            self.check_model_call(worst_estimate(input), max_tokens, price),
            Err(e) if matches!(
                e.kind,
                BudgetKind::InputTokens | BudgetKind::TotalTokens | BudgetKind::Cost
            )
        )
    }

    /// The admission check of [`Ledger::admit_model_call`], reserving nothing.
    fn check_model_call(
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
                let after_input = limit - spent - p.worst_cost(input, 0);
                let out_cost = p.worst_cost(0, 1);
                if after_input <= 0.0 || (out_cost > 0.0 && after_input < out_cost) {
                    return Err(l.exhausted(
                        BudgetKind::Cost,
                        limit,
                        spent + p.worst_cost(input, 1),
                    ));
                }
                if out_cost > 0.0 {
                    let left = (after_input / out_cost).floor() as u64;
                    cap = Some(cap.map_or(left, |c| c.min(left)));
                }
            }
        }
        Ok(cap.map(|c| u32::try_from(c).unwrap_or(u32::MAX)))
    }

    /// What [`Ledger::admit_model_call`] reserves for a request estimated at `input`
    /// prompt tokens sent with `cap`.
    pub(crate) fn worst_case(input: u64, cap: Option<u32>, price: Option<&ModelPrice>) -> Spend {
        let out = cap.map_or(0, u64::from);
        Spend {
            input_tokens: input,
            output_tokens: out,
            cost: price.map_or(0.0, |p| p.worst_cost(input, out)),
            model_calls: 1,
            ..Spend::default()
        }
    }

    /// What [`Ledger::settle_model_call`] charges for a request that `used` this.
    pub(crate) fn charge_of(used: Tokens, price: Option<&ModelPrice>) -> Spend {
        Spend {
            input_tokens: used.input,
            output_tokens: used.output,
            cached_input_tokens: used.cached_input.min(used.input),
            reasoning_tokens: used.reasoning.min(used.output),
            cost: price.map_or(0.0, |p| {
                p.cost(used.input, used.cached_input, used.output, used.reasoning)
            }),
            model_calls: 1,
            ..Spend::default()
        }
    }

    /// Takes back a reservation of [`Ledger::admit_model_call`] for a request that was
    /// never sent.
    pub(crate) fn cancel_model_call(self: &Arc<Self>, worst: &Spend) {
        for l in self.chain() {
            l.lock().reserved.subtract(worst);
        }
    }

    /// Settles the request admitted with [`Ledger::admit_model_call`]: its reservation is
    /// replaced by what it `used` (tokens as the provider counted them).
    pub(crate) fn settle_model_call(
        self: &Arc<Self>,
        input_est: u64,
        cap: Option<u32>,
        used: Tokens,
        price: Option<&ModelPrice>,
    ) {
        let cap = cap.map_or(0, u64::from);
        let charge = Self::charge_of(used, price);
        for l in self.chain() {
            let mut s = l.lock();
            let r = &mut s.reserved;
            r.input_tokens = r.input_tokens.saturating_sub(input_est);
            r.output_tokens = r.output_tokens.saturating_sub(cap);
            r.cost -= price.map_or(0.0, |p| p.worst_cost(input_est, cap));
            if r.cost < 1e-12 {
                r.cost = 0.0;
            }
            r.model_calls = r.model_calls.saturating_sub(1);
            s.spent.add(&charge);
            self.note_other_agent(l, &mut s, &charge);
        }
    }

    /// Keeps `charge`, made by this ledger's agent, under that agent on ledger `l` of
    /// the chain when `l` belongs to another agent (a call above that delegated).
    fn note_other_agent(&self, l: &Ledger, s: &mut LedgerState, charge: &Spend) {
        if l.agent == self.agent {
            return;
        }
        match s.by_agent.get_mut(&self.agent) {
            Some(spend) => spend.add(charge),
            None => {
                s.by_agent.insert(self.agent.clone(), charge.clone());
            }
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
        // Per-tool counts are kept for the tools some budget of the chain limits: a
        // count for every tool would cost an allocation per call for nothing to check.
        let counted = self
            .chain()
            .any(|l| l.limits.tool_calls_per_tool.contains_key(tool));
        for l in self.chain() {
            let mut s = l.lock();
            s.spent.add_tool_call(tool, counted);
            if l.agent != self.agent {
                let spend = match s.by_agent.get_mut(&self.agent) {
                    Some(spend) => spend,
                    None => s.by_agent.entry(self.agent.clone()).or_default(),
                };
                spend.add_tool_call(tool, counted);
            }
        }
        Ok(())
    }

    /// A hook renamed an admitted call from `from` to `to`: the call must fit `to`'s
    /// per-tool budgets, and its per-tool charge moves from `from` to `to` (the total
    /// tool-call charge stays). On `Err` nothing changes and the call must not run.
    pub(crate) fn retarget_tool_call(
        self: &Arc<Self>,
        from: &str,
        to: &str,
    ) -> Result<(), BudgetExhausted> {
        for l in self.chain() {
            if let Some(limit) = l.limits.tool_calls_per_tool.get(to) {
                let n = l
                    .lock()
                    .spent
                    .tool_calls_per_tool
                    .get(to)
                    .copied()
                    .unwrap_or(0);
                if n >= *limit {
                    return Err(l.exhausted(
                        BudgetKind::ToolCallsOf(to.to_owned()),
                        *limit as f64,
                        n as f64,
                    ));
                }
            }
        }
        let limited = |tool: &str| {
            self.chain()
                .any(|l| l.limits.tool_calls_per_tool.contains_key(tool))
        };
        let (was, now) = (limited(from), limited(to));
        if !was && !now {
            return Ok(());
        }
        for l in self.chain() {
            let mut s = l.lock();
            s.spent.move_tool_call(from, to, was, now);
            if l.agent != self.agent
                && let Some(spend) = s.by_agent.get_mut(&self.agent)
            {
                spend.move_tool_call(from, to, was, now);
            }
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

/// The most a request estimated at `input` prompt tokens is taken to cost before the
/// provider is asked ([`COUNT_MARGIN`] times it plus [`COUNT_SLACK`]).
pub(crate) fn worst_estimate(input: u64) -> u64 {
    input
        .saturating_mul(COUNT_MARGIN)
        .saturating_add(COUNT_SLACK)
}

/// The pre-request estimate of a request's prompt tokens (see [`BYTES_PER_TOKEN`]).
pub(crate) fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
