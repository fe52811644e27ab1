//! [`ArgCondition`]: a declarative test on a tool call's arguments, for approval rules
//! and the tool guard's deny rules.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use rein_core::BuildError;
use rein_core::hook::{HookError, HookSite};

/// A condition on one argument of a tool call, addressed by a JSON pointer. Every
/// comparison given must hold (they are ANDed); at least one is required.
///
/// ```yaml
/// {path: /amount, gt: 100}            # amount > 100
/// {path: /refund/currency, ne: EUR}   # nested field, JSON equality
/// {path: /note, exists: true}         # the field is present
/// ```
///
/// **Numbers compare numerically in every form**, in `gt`/`gte`/`lt`/`lte` and in
/// `eq`/`ne` alike: `12345`, `12345.0`, `1.2345e4` and the numeric string `"12345"`
/// (surrounding whitespace ignored) are one value, so `{eq: 12345}` holds for all of
/// them. Integers compare exactly (no rounding through `f64`). A **string** that is not a
/// number compares exactly: case, whitespace and Unicode form matter (`"EUR"` is not
/// `"eur"` nor `" EUR"`); arrays and objects compare element by element under the same
/// rules. **Fail closed:** when a
/// numeric comparison cannot be made — the field is missing, or is not a number — the
/// condition *holds*, so the guarded action (asking for approval, denying) happens. A
/// condition is evaluated on the call's final form (after caps and rewrites: the
/// `PreActing` hooks re-check a rewritten call).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ArgCondition {
    /// JSON pointer to the argument (`/amount`, `/refund/amount`).
    pub path: String,
    /// Holds when the argument is greater than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gt: Option<f64>,
    /// Holds when the argument is at least this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gte: Option<f64>,
    /// Holds when the argument is less than this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lt: Option<f64>,
    /// Holds when the argument is at most this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lte: Option<f64>,
    /// Holds when the argument equals this value (numbers numerically, see the type's
    /// docs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eq: Option<Value>,
    /// Holds when the argument differs from this value (numbers numerically) or is
    /// missing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ne: Option<Value>,
    /// Holds when the argument is present (`true`) or absent (`false`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exists: Option<bool>,
}

impl ArgCondition {
    /// A condition on the argument at `path` (a JSON pointer) with no comparison yet.
    pub fn at(path: impl Into<String>) -> Self {
        Self {
            path: path.into(),
            ..Self::default()
        }
    }

    /// Adds "greater than `x`".
    #[must_use]
    pub fn gt(mut self, x: f64) -> Self {
        self.gt = Some(x);
        self
    }

    /// Checks the condition's form; `key` names it in the error (e.g.
    /// `approval.when.refund`).
    pub(crate) fn validate(&self, key: &str) -> Result<(), BuildError> {
        if !self.path.starts_with('/') {
            return Err(BuildError::invalid_config(
                &format!("{key}.path"),
                format!(
                    "`{}` is not a JSON pointer (it starts with `/`, e.g. `/amount`)",
                    self.path
                ),
            ));
        }
        let numeric = [self.gt, self.gte, self.lt, self.lte];
        if numeric.iter().flatten().any(|x| !x.is_finite()) {
            return Err(BuildError::invalid_config(
                key,
                "comparison bounds must be finite numbers",
            ));
        }
        if numeric.iter().all(Option::is_none)
            && self.eq.is_none()
            && self.ne.is_none()
            && self.exists.is_none()
        {
            return Err(BuildError::invalid_config(
                key,
                "a condition needs at least one of gt, gte, lt, lte, eq, ne, exists",
            ));
        }
        Ok(())
    }

    /// Checks that the argument the condition reads exists in `tool`'s JSON Schema
    /// (each pointer segment a declared property, where the schema declares
    /// properties).
    pub(crate) fn check_schema(
        &self,
        key: &str,
        tool: &str,
        site: &HookSite<'_>,
    ) -> Result<(), HookError> {
        let Some(mut schema) = site.schema(tool) else {
            return Ok(());
        };
        for token in self.path.split('/').skip(1) {
            let token = token.replace("~1", "/").replace("~0", "~");
            let Some(props) = schema.get("properties").and_then(Value::as_object) else {
                // A free-form object: nothing to check against.
                return Ok(());
            };
            match props.get(&token) {
                Some(s) => schema = s,
                None => {
                    let known: Vec<&str> = props.keys().map(String::as_str).collect();
                    return Err(HookError::new(format!(
                        "{key}.path: tool `{tool}` has no argument `{}` (its schema declares [{}])",
                        self.path,
                        known.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Whether the condition holds for these arguments (see the type's docs for the
    /// fail-closed rule).
    pub fn holds(&self, args: &Value) -> bool {
        let v = args.pointer(&self.path);
        if let Some(want) = self.exists
            && v.is_some() != want
        {
            return false;
        }
        if let Some(eq) = &self.eq
            && !v.is_some_and(|v| same_value(v, eq))
        {
            return false;
        }
        if let Some(ne) = &self.ne
            && v.is_some_and(|v| same_value(v, ne))
        {
            return false;
        }
        let numeric = [self.gt, self.gte, self.lt, self.lte];
        if numeric.iter().all(Option::is_none) {
            return true;
        }
        let Some(x) = v.and_then(as_number) else {
            // Cannot compare: fail closed.
            return true;
        };
        self.gt.is_none_or(|b| x > b)
            && self.gte.is_none_or(|b| x >= b)
            && self.lt.is_none_or(|b| x < b)
            && self.lte.is_none_or(|b| x <= b)
    }
}

/// A number read from any JSON form a schema may admit for it: exact when integral.
#[derive(Clone, Copy, Debug)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn of(v: &Value) -> Option<Self> {
        match v {
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Some(Num::Int(i128::from(i))),
                (None, Some(u)) => Some(Num::Int(i128::from(u))),
                _ => n.as_f64().filter(|x| x.is_finite()).map(Num::Float),
            },
            Value::String(s) => {
                let t = s.trim();
                // `parse::<f64>` also accepts `inf`/`NaN`: only finite numbers count.
                match t.parse::<i128>() {
                    Ok(i) => Some(Num::Int(i)),
                    Err(_) => t
                        .parse::<f64>()
                        .ok()
                        .filter(|x| x.is_finite())
                        .map(Num::Float),
                }
            }
            _ => None,
        }
    }

    fn eq(self, other: Num) -> bool {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (Num::Int(i), Num::Float(f)) | (Num::Float(f), Num::Int(i)) => {
                // Exact: a float equals an integer only when it is that integer.
                f.fract() == 0.0 && f.abs() < 1.7e38 && f as i128 == i
            }
            (Num::Float(a), Num::Float(b)) => a == b,
        }
    }
}

/// JSON equality in which numbers (and numeric strings) compare numerically, at every
/// depth.
fn same_value(a: &Value, b: &Value) -> bool {
    let numeric = |v: &Value| matches!(v, Value::Number(_) | Value::String(_));
    if numeric(a)
        && numeric(b)
        && (a.is_number() || b.is_number() || a != b)
        && let (Some(x), Some(y)) = (Num::of(a), Num::of(b))
    {
        return x.eq(y);
    }
    match (a, b) {
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same_value(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, p)| y.get(k).is_some_and(|q| same_value(p, q)))
        }
        _ => a == b,
    }
}

fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok().filter(|x| x.is_finite()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn comparisons_are_anded_and_string_numbers_compare_as_numbers() {
        let c: ArgCondition =
            serde_json::from_value(json!({"path": "/amount", "gt": 100, "lte": 1000})).unwrap();
        assert!(c.holds(&json!({"amount": 101})));
        assert!(c.holds(&json!({"amount": "500"})));
        assert!(!c.holds(&json!({"amount": 100})));
        assert!(!c.holds(&json!({"amount": 1001})));
    }

    #[test]
    fn an_argument_that_cannot_be_compared_makes_the_condition_hold() {
        let c = ArgCondition::at("/amount").gt(100.0);
        assert!(c.holds(&json!({})));
        assert!(c.holds(&json!({"amount": "lots"})));
        assert!(c.holds(&json!({"amount": null})));
    }

    #[test]
    fn equality_and_presence_compare_json_values() {
        let eq: ArgCondition = serde_json::from_value(json!({"path": "/c", "eq": "EUR"})).unwrap();
        assert!(eq.holds(&json!({"c": "EUR"})) && !eq.holds(&json!({"c": "USD"})));
        let absent: ArgCondition =
            serde_json::from_value(json!({"path": "/n", "exists": false})).unwrap();
        assert!(absent.holds(&json!({})) && !absent.holds(&json!({"n": 1})));
    }

    #[test]
    fn a_condition_without_comparison_or_pointer_is_a_config_error() {
        let e = ArgCondition::at("/amount")
            .validate("approval.when.refund")
            .unwrap_err();
        assert!(e.to_string().contains("approval.when.refund"), "{e}");
        let e = ArgCondition::at("amount")
            .gt(1.0)
            .validate("k")
            .unwrap_err();
        assert!(e.to_string().contains("JSON pointer"), "{e}");
    }
}
