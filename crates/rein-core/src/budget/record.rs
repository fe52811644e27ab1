//! The JSON records budgets leave in message metadata ([`BUDGET_KEY`](super::BUDGET_KEY)
//! on a session, [`SPEND_KEY`](super::SPEND_KEY) on a reply), built field by field with
//! only what is non-zero (a [`Spend`]) or set (a [`Budget`]). Both types fill a missing
//! field with its default, so a record reads back as the value it was built from; a
//! record is built for every budgeted call, which is why it skips serde's generic path.

use serde::Deserialize;
use serde_json::{Map, Value};

use super::{Budget, Spend};

/// `spend` as a JSON object of its non-zero fields.
pub(crate) fn spend_json(spend: &Spend) -> Value {
    let mut m = Map::new();
    let counts = [
        ("input_tokens", spend.input_tokens),
        ("output_tokens", spend.output_tokens),
        ("cached_input_tokens", spend.cached_input_tokens),
        ("reasoning_tokens", spend.reasoning_tokens),
    ];
    put_counts(&mut m, &counts);
    if spend.cost != 0.0 {
        m.insert("cost".to_owned(), Value::from(spend.cost));
    }
    put_counts(
        &mut m,
        &[
            ("model_calls", spend.model_calls),
            ("tool_calls", spend.tool_calls),
        ],
    );
    if !spend.tool_calls_per_tool.is_empty() {
        m.insert(
            "tool_calls_per_tool".to_owned(),
            per_tool(&spend.tool_calls_per_tool),
        );
    }
    put_counts(&mut m, &[("wall_clock_ms", spend.wall_clock_ms)]);
    Value::Object(m)
}

/// `budget` as a JSON object of the limits it sets.
pub(crate) fn budget_json(budget: &Budget) -> Value {
    let mut m = Map::new();
    put_limit(&mut m, "input_tokens", budget.input_tokens);
    put_limit(&mut m, "output_tokens", budget.output_tokens);
    put_limit(&mut m, "total_tokens", budget.total_tokens);
    if let Some(c) = budget.cost {
        m.insert("cost".to_owned(), Value::from(c));
    }
    put_limit(&mut m, "model_calls", budget.model_calls);
    put_limit(&mut m, "tool_calls", budget.tool_calls);
    if !budget.tool_calls_per_tool.is_empty() {
        m.insert(
            "tool_calls_per_tool".to_owned(),
            per_tool(&budget.tool_calls_per_tool),
        );
    }
    put_limit(&mut m, "wall_clock_ms", budget.wall_clock_ms);
    Value::Object(m)
}

/// A session's record: `{"spent", "reserved"}` (`reserved` only while a request is in
/// flight).
pub(crate) fn session_record(spent: &Spend, reserved: &Spend) -> Value {
    let mut m = Map::new();
    m.insert("spent".to_owned(), spend_json(spent));
    if *reserved != Spend::default() {
        m.insert("reserved".to_owned(), spend_json(reserved));
    }
    Value::Object(m)
}

/// A reply's record: `{"spent", "remaining"}`.
pub(crate) fn spend_record(spent: &Spend, remaining: &Budget) -> Value {
    let mut m = Map::new();
    m.insert("spent".to_owned(), spend_json(spent));
    m.insert("remaining".to_owned(), budget_json(remaining));
    Value::Object(m)
}

/// What a session record says the session has spent, reservations included (a
/// reservation left by a crashed request stays charged); an unreadable part counts as
/// nothing spent.
pub(crate) fn stored_spend(value: &Value) -> Spend {
    let read = |key: &str| value.get(key).and_then(|v| Spend::deserialize(v).ok());
    let mut total = read("spent").unwrap_or_default();
    if let Some(r) = read("reserved") {
        total.add(&r);
    }
    total
}

fn put_counts(m: &mut Map<String, Value>, counts: &[(&str, u64)]) {
    for (key, v) in counts {
        if *v != 0 {
            m.insert((*key).to_owned(), Value::from(*v));
        }
    }
}

fn put_limit(m: &mut Map<String, Value>, key: &str, limit: Option<u64>) {
    if let Some(v) = limit {
        m.insert(key.to_owned(), Value::from(v));
    }
}

fn per_tool(counts: &indexmap::IndexMap<String, u64>) -> Value {
    Value::Object(
        counts
            .iter()
            .map(|(tool, n)| (tool.clone(), Value::from(*n)))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_spend() -> Spend {
        let mut s = Spend {
            input_tokens: 1,
            output_tokens: 2,
            cached_input_tokens: 3,
            reasoning_tokens: 4,
            cost: 0.5,
            model_calls: 6,
            tool_calls: 7,
            wall_clock_ms: 9,
            ..Spend::default()
        };
        s.tool_calls_per_tool.insert("refund".into(), 8);
        s
    }

    #[test]
    fn a_spend_record_reads_back_as_the_spend_it_was_built_from() {
        for s in [Spend::default(), full_spend()] {
            let back: Spend = serde_json::from_value(spend_json(&s)).unwrap();
            assert_eq!(back, s);
        }
        let full = spend_json(&full_spend());
        assert_eq!(full.as_object().unwrap().len(), 9, "every field: {full}");
        assert_eq!(spend_json(&Spend::default()), serde_json::json!({}));
    }

    #[test]
    fn a_budget_record_names_the_limits_set_and_reads_back_as_the_budget() {
        let all = Budget::new()
            .input_tokens(1)
            .output_tokens(2)
            .total_tokens(3)
            .cost(4.5)
            .model_calls(5)
            .tool_calls(6)
            .tool_calls_of("refund", 7)
            .wall_clock(std::time::Duration::from_millis(8));
        for b in [Budget::new(), Budget::new().model_calls(0), all] {
            let v = budget_json(&b);
            let back: Budget = serde_json::from_value(v.clone()).unwrap();
            assert_eq!(back, b, "{v}");
        }
        assert_eq!(
            budget_json(&Budget::new().model_calls(2)),
            serde_json::json!({"model_calls": 2}),
            "an unset limit is left out, a used-up one (0) kept"
        );
    }

    #[test]
    fn a_session_record_adds_its_reservation_to_what_was_spent() {
        let spent = Spend {
            model_calls: 2,
            ..Spend::default()
        };
        let reserved = Spend {
            model_calls: 1,
            output_tokens: 50,
            ..Spend::default()
        };
        let record = session_record(&spent, &reserved);
        let total = stored_spend(&record);
        assert_eq!((total.model_calls, total.output_tokens), (3, 50));
        assert!(
            session_record(&spent, &Spend::default())
                .get("reserved")
                .is_none()
        );
        assert_eq!(
            stored_spend(&serde_json::json!({"spent": "junk"})),
            Spend::default()
        );
    }
}
