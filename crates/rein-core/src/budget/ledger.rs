//! The ledgers a call draws from: one per budget, chained to the budget above, so every
//! charge reaches every budget of the call, its session and the calls that delegated to
//! it.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::time::Instant;

use super::{BYTES_PER_TOKEN, Budget, BudgetExhausted, BudgetKind, BudgetScope, ModelPrice, Spend};

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
        // Per-tool counts are kept for the tools some budget of the chain limits: a
        // count for every tool would cost an allocation per call for nothing to check.
        let counted = self
            .chain()
            .any(|l| l.limits.tool_calls_per_tool.contains_key(tool));
        for l in self.chain() {
            let mut s = l.lock();
            s.spent.tool_calls = s.spent.tool_calls.saturating_add(1);
            if counted {
                match s.spent.tool_calls_per_tool.get_mut(tool) {
                    Some(n) => *n = n.saturating_add(1),
                    None => {
                        s.spent.tool_calls_per_tool.insert(tool.to_owned(), 1);
                    }
                }
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
    use crate::budget::{Budget, BudgetKind, BudgetScope, ModelPrice, Spend};

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
