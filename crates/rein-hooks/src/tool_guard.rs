//! [`ToolGuardHook`]: injects missing tool parameters and clamps numeric ones.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Number, Value};

use super::condition::ArgCondition;
use super::masking::OnError;
use rein_core::BuildError;
use rein_core::ToolUse;
use rein_core::hook::{
    EventKind, FailurePolicy, HookError, HookEvent, HookSite, Interest, RevealNumbers, SyncHook,
};

/// Bounds of a numeric cap. At least one is required; `max` must not be negative
/// and `min` must not exceed `max`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CapBounds {
    /// Smallest allowed value; smaller values are raised to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// Largest allowed value; larger values are lowered to it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

/// A numeric cap: a bare number is a maximum (`{ "amount": 1000 }`, as in the
/// reference), a table gives bounds (`{ "amount": { "min": 0, "max": 1000 } }`).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CapSpec {
    /// Upper bound only.
    Max(f64),
    /// Explicit bounds.
    Bounds(CapBounds),
}

impl CapSpec {
    fn bounds(self) -> CapBounds {
        match self {
            CapSpec::Max(max) => CapBounds {
                min: None,
                max: Some(max),
            },
            CapSpec::Bounds(b) => b,
        }
    }
}

/// How a capped value written as a string (`"5000"`) is rewritten.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StringNumbers {
    /// Stays a string; only a value out of bounds is rewritten (default).
    #[default]
    Keep,
    /// Becomes a JSON number.
    Convert,
}

/// Injections and caps for one tool (see [`ToolGuardConfig::per_tool`]).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolRules {
    /// Parameters added when absent, by name or JSON pointer.
    pub inject_params: BTreeMap<String, Value>,
    /// Numeric caps, by name or JSON pointer.
    pub numeric_caps: BTreeMap<String, CapSpec>,
}

/// Settings of [`ToolGuardHook`] (the `tool_guard` section of
/// [`HooksConfig`](super::HooksConfig)). Every key is optional.
///
/// Parameters are addressed by a top-level name (`amount`) or by a JSON pointer
/// (`/refund/amount`; `~1` and `~0` escape `/` and `~`). In caps, a `*` segment matches
/// every element of an array or every value of an object (`/items/*/qty`).
///
/// ```json
/// { "enabled": true,
///   "inject_params": { "channel": "online" },
///   "numeric_caps": { "amount": 1000 },
///   "per_tool": { "submitRefund": { "numeric_caps": { "amount": { "min": 0, "max": 500 } } } } }
/// ```
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolGuardConfig {
    /// Install the hook (default `false`).
    pub enabled: bool,
    /// Tools the top-level `inject_params` and `numeric_caps` apply to (default empty:
    /// every tool).
    pub tools: Vec<String>,
    /// Parameters added to a call when absent (default none). Existing values are
    /// never overridden.
    pub inject_params: BTreeMap<String, Value>,
    /// Numeric caps (default none).
    pub numeric_caps: BTreeMap<String, CapSpec>,
    /// Rules for one tool each, applied after the top-level ones (default none).
    pub per_tool: BTreeMap<String, ToolRules>,
    /// Per tool, a condition under which its calls are denied, evaluated on the
    /// guarded arguments (after injections and caps), e.g.
    /// `transfer: {path: /currency, ne: EUR}`. Default none. The pointer must address
    /// an argument the tool's schema declares (checked at `build()`).
    pub deny_when: BTreeMap<String, ArgCondition>,
    /// How capped values written as strings are rewritten (default `keep`).
    pub string_numbers: StringNumbers,
    /// Failure policy (default `fail_closed`: a failure inside the hook fails the
    /// call rather than letting an unguarded call run).
    pub on_error: OnError,
}

impl Default for ToolGuardConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            tools: Vec::new(),
            inject_params: BTreeMap::new(),
            numeric_caps: BTreeMap::new(),
            per_tool: BTreeMap::new(),
            deny_when: BTreeMap::new(),
            string_numbers: StringNumbers::Keep,
            on_error: OnError::FailClosed,
        }
    }
}

/// A parsed parameter address.
#[derive(Clone, Debug, PartialEq)]
struct Pointer {
    /// The address as configured, for messages.
    display: String,
    tokens: Vec<String>,
}

impl Pointer {
    /// The address as a JSON pointer (`amount` → `/amount`).
    fn pointer_form(&self) -> String {
        if self.display.starts_with('/') {
            self.display.clone()
        } else {
            format!("/{}", self.display.replace('~', "~0").replace('/', "~1"))
        }
    }

    fn parse(key: &str, wildcards: bool) -> Result<Self, String> {
        if key.is_empty() {
            return Err("the parameter name is empty".to_owned());
        }
        let tokens: Vec<String> = match key.strip_prefix('/') {
            None => vec![key.to_owned()],
            Some(rest) => rest
                .split('/')
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect(),
        };
        if tokens.iter().any(String::is_empty) {
            return Err(format!("`{key}` has an empty segment"));
        }
        if !wildcards && tokens.iter().any(|t| t == "*") {
            return Err(format!("`{key}`: `*` is only allowed in numeric caps"));
        }
        Ok(Self {
            display: key.to_owned(),
            tokens,
        })
    }
}

#[derive(Clone, Debug)]
struct Cap {
    at: Pointer,
    min: Option<f64>,
    max: Option<f64>,
}

#[derive(Clone, Debug, Default)]
struct Rule {
    /// `None`: every tool.
    tools: Option<Vec<String>>,
    injects: Vec<(Pointer, Value)>,
    caps: Vec<Cap>,
}

fn compile_rules(
    prefix: &str,
    tools: Option<Vec<String>>,
    inject: &BTreeMap<String, Value>,
    caps: &BTreeMap<String, CapSpec>,
) -> Result<Rule, BuildError> {
    let mut rule = Rule {
        tools,
        ..Rule::default()
    };
    for (key, value) in inject {
        let at = Pointer::parse(key, false)
            .map_err(|m| BuildError::invalid_config(&format!("{prefix}.inject_params.{key}"), m))?;
        rule.injects.push((at, value.clone()));
    }
    for (key, spec) in caps {
        let at = Pointer::parse(key, true)
            .map_err(|m| BuildError::invalid_config(&format!("{prefix}.numeric_caps.{key}"), m))?;
        let b = spec.bounds();
        let err = |field: &str, m: &str| {
            let key = match spec {
                CapSpec::Max(_) => format!("{prefix}.numeric_caps.{key}"),
                CapSpec::Bounds(_) => format!("{prefix}.numeric_caps.{key}.{field}"),
            };
            BuildError::invalid_config(&key, m)
        };
        if b.min.is_none() && b.max.is_none() {
            return Err(err("max", "a cap needs `min`, `max` or both"));
        }
        if let Some(max) = b.max {
            if !max.is_finite() {
                return Err(err("max", "must be a finite number"));
            }
            if max < 0.0 {
                return Err(err("max", &format!("must not be negative (got {max})")));
            }
        }
        if let Some(min) = b.min {
            if !min.is_finite() {
                return Err(err("min", "must be a finite number"));
            }
            if b.max.is_some_and(|max| min > max) {
                return Err(err("min", "must not exceed `max`"));
            }
        }
        rule.caps.push(Cap {
            at,
            min: b.min,
            max: b.max,
        });
    }
    Ok(rule)
}

/// Why a call's arguments were rejected.
struct Rejection(String);

/// Guards tool arguments before a tool runs. Priority **20** (first: every later
/// hook, the audit record and the tool see the guarded arguments); off by default in
/// [`HooksConfig`](super::HooksConfig).
///
/// On `PreActing`, for each rule whose scope includes the tool (top-level rules
/// scoped by `tools`, then the tool's `per_tool` rules):
/// 1. **Inject**: each configured parameter that is absent is added (intermediate
///    objects are created for pointers). Existing values keep their value and type.
/// 2. **Cap**: each capped value present is checked. Numbers out of bounds are
///    clamped, keeping their type (an integer stays an integer, rounded inwards if a
///    bound is fractional). A numeric string (`"5000"`) is clamped too and stays a
///    string unless `string_numbers = convert`. `"NaN"`, `"inf"`, other non-numeric
///    strings, booleans, `null`, arrays and objects in a capped field **deny** the call
///    with a reason naming the parameter; they are never passed through.
///
/// A change is applied with [`set_tool_use`](rein_core::PreActingEvent::set_tool_use), so
/// the tool runs with the guarded arguments and memory records them; the call id is
/// kept. Clamps are logged at `warn` on the `rein::tool_guard` target, the old and new
/// values as digests (`"4B#…"`) unless the agent records content
/// ([`record_content`](rein_core::AgentBuilder::record_content)) or a
/// [`RevealNumbers`](rein_core::observe::RevealNumbers) in the run lists the field. A
/// denial's reason names the parameter and the kind of value found, never the value
/// (it reaches the decision trail, `rein::decision` events and logs). A call already
/// denied by an earlier hook is left alone.
pub struct ToolGuardHook {
    config: ToolGuardConfig,
    rules: Vec<Rule>,
}

impl fmt::Debug for ToolGuardHook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolGuardHook")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ToolGuardHook {
    /// A hook with these settings.
    ///
    /// # Errors
    /// [`BuildErrorKind::InvalidConfig`](rein_core::BuildErrorKind::InvalidConfig) naming
    /// the key (e.g. `tool_guard.numeric_caps.amount`) for a negative or non-finite
    /// cap, `min` above `max`, a cap without bounds, or a malformed parameter address.
    pub fn new(config: ToolGuardConfig) -> Result<Self, BuildError> {
        let scope = (!config.tools.is_empty()).then(|| config.tools.clone());
        let mut rules = vec![compile_rules(
            "tool_guard",
            scope,
            &config.inject_params,
            &config.numeric_caps,
        )?];
        for (tool, r) in &config.per_tool {
            rules.push(compile_rules(
                &format!("tool_guard.per_tool.{tool}"),
                Some(vec![tool.clone()]),
                &r.inject_params,
                &r.numeric_caps,
            )?);
        }
        rules.retain(|r| !r.injects.is_empty() || !r.caps.is_empty());
        for (tool, condition) in &config.deny_when {
            condition.validate(&format!("tool_guard.deny_when.{tool}"))?;
        }
        Ok(Self { config, rules })
    }

    /// The settings.
    pub fn config(&self) -> &ToolGuardConfig {
        &self.config
    }

    /// Applies the rules to a tool call: `Ok(Some(call))` when the arguments changed,
    /// `Ok(None)` when they are fine as they are, `Err(reason)` when the call must be
    /// denied.
    ///
    /// The denial reason never quotes an argument's value (it names the parameter and
    /// the kind of value found), and the clamp logs show digests of the values (see
    /// the type's docs for the opt-in that shows them).
    pub fn guard(&self, call: &ToolUse) -> Result<Option<ToolUse>, String> {
        self.guard_with(call, &|_| false)
    }

    /// [`ToolGuardHook::guard`], logging a clamp's values readable for the parameters
    /// `reveal` accepts (by the cap's address).
    fn guard_with(
        &self,
        call: &ToolUse,
        reveal: &dyn Fn(&Pointer) -> bool,
    ) -> Result<Option<ToolUse>, String> {
        let mut input = call.input.clone();
        let mut changed = false;
        for rule in &self.rules {
            if rule.tools.as_ref().is_some_and(|t| !t.contains(&call.name)) {
                continue;
            }
            for (at, value) in &rule.injects {
                changed |= inject(&mut input, &at.tokens, value);
            }
            for cap in &rule.caps {
                let mut visit = |v: &mut Value| self.clamp(call, cap, v, reveal);
                changed |= visit_mut(&mut input, &cap.at.tokens, &mut visit).map_err(|r| r.0)?;
            }
        }
        if let Some(condition) = self.config.deny_when.get(&call.name)
            && condition.holds(&input)
        {
            return Err(format!(
                "tool `{}` is not allowed when `{}` is {} (tool_guard.deny_when)",
                call.name,
                condition.path,
                describe_condition(condition)
            ));
        }
        Ok(changed.then(|| ToolUse {
            input,
            ..call.clone()
        }))
    }

    /// Clamps one value in place; returns whether it changed. `reveal`: whether the
    /// clamp log shows the values rather than their digests (asked only for a clamp).
    fn clamp(
        &self,
        call: &ToolUse,
        cap: &Cap,
        v: &mut Value,
        reveal: &dyn Fn(&Pointer) -> bool,
    ) -> Result<bool, Rejection> {
        // The reason says what kind of value was found, never the value: it reaches
        // the decision trail, the `rein::decision` events and the logs.
        let reject = |got: &str| {
            Rejection(format!(
                "argument `{}` of tool `{}` must be a finite number {}; got {got}",
                cap.at.display,
                call.name,
                describe_range(cap)
            ))
        };
        let clamped = match v {
            Value::Number(n) => clamp_number(n, cap.min, cap.max),
            Value::String(s) => {
                const NOT_NUMERIC: &str = "a string that is not a finite number";
                let parsed: f64 = s.trim().parse().map_err(|_| reject(NOT_NUMERIC))?;
                if !parsed.is_finite() {
                    return Err(reject(NOT_NUMERIC));
                }
                let bounded = bound(parsed, cap.min, cap.max);
                let integral = s.trim().parse::<i128>().is_ok();
                match self.config.string_numbers {
                    StringNumbers::Keep if bounded == parsed => None,
                    StringNumbers::Keep => Some(Value::String(format_number(bounded, integral))),
                    StringNumbers::Convert => Some(number_value(bounded, integral)),
                }
            }
            Value::Null => return Err(reject("null")),
            Value::Bool(_) => return Err(reject("a boolean")),
            Value::Array(_) => return Err(reject("an array")),
            Value::Object(_) => return Err(reject("an object")),
        };
        let Some(new) = clamped else {
            return Ok(false);
        };
        let reveal = reveal(&cap.at);
        let shown = |x: &Value| if reveal { x.to_string() } else { digest(x) };
        tracing::warn!(
            target: "rein::tool_guard",
            tool = %call.name,
            tool_call_id = %call.id,
            param = %cap.at.display,
            from = %shown(v),
            to = %shown(&new),
            "numeric argument clamped"
        );
        *v = new;
        Ok(true)
    }
}

/// A value's digest for logs, in the decision trail's form (`"{len}B#{fnv64}"`): equal
/// values are recognisable, the value is not readable.
fn digest(v: &Value) -> String {
    let text = v.to_string();
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{}B#{hash:016x}", text.len())
}

fn describe_condition(c: &ArgCondition) -> String {
    let mut parts = Vec::new();
    for (op, v) in [(">", c.gt), (">=", c.gte), ("<", c.lt), ("<=", c.lte)] {
        if let Some(v) = v {
            parts.push(format!("{op} {v}"));
        }
    }
    if let Some(v) = &c.eq {
        parts.push(format!("= {v}"));
    }
    if let Some(v) = &c.ne {
        parts.push(format!("not {v}"));
    }
    if let Some(e) = c.exists {
        parts.push(if e { "present" } else { "absent" }.to_owned());
    }
    parts.join(" and ")
}

fn describe_range(cap: &Cap) -> String {
    match (cap.min, cap.max) {
        (Some(lo), Some(hi)) => format!("within [{lo}, {hi}]"),
        (Some(lo), None) => format!("of at least {lo}"),
        (None, Some(hi)) => format!("of at most {hi}"),
        (None, None) => String::new(),
    }
}

fn bound(x: f64, min: Option<f64>, max: Option<f64>) -> f64 {
    let x = min.map_or(x, |lo| x.max(lo));
    max.map_or(x, |hi| x.min(hi))
}

/// A JSON number for `x`: an integer when `integral` (rounded inwards already).
fn number_value(x: f64, integral: bool) -> Value {
    if integral && let Some(i) = f64_to_i64(x) {
        return Value::Number(i.into());
    }
    Number::from_f64(x).map_or(Value::Null, Value::Number)
}

fn format_number(x: f64, integral: bool) -> String {
    match f64_to_i64(x).filter(|_| integral) {
        Some(i) => i.to_string(),
        None => x.to_string(),
    }
}

/// `x` as an `i64` when it is integral and in range.
fn f64_to_i64(x: f64) -> Option<i64> {
    const LIMIT: f64 = 9_223_372_036_854_775_807.0;
    (x.fract() == 0.0 && x.abs() < LIMIT).then_some(x as i64)
}

/// Clamps a JSON number, keeping integers integral (bounds rounded inwards).
fn clamp_number(n: &Number, min: Option<f64>, max: Option<f64>) -> Option<Value> {
    if let Some(i) = n.as_i64().map(i128::from).or(n.as_u64().map(i128::from)) {
        let lo = min.map(|m| m.ceil() as i128);
        let hi = max.map(|m| m.floor() as i128);
        let mut c = i;
        if let Some(lo) = lo {
            c = c.max(lo);
        }
        if let Some(hi) = hi {
            c = c.min(hi);
        }
        if c == i {
            return None;
        }
        return Some(match i64::try_from(c) {
            Ok(v) => Value::Number(v.into()),
            Err(_) => Value::Number(u64::try_from(c).unwrap_or(u64::MAX).into()),
        });
    }
    let x = n.as_f64()?;
    let b = bound(x, min, max);
    (b != x).then(|| number_value(b, false))
}

/// Adds `value` at `tokens` when absent. Returns whether the input changed.
fn inject(input: &mut Value, tokens: &[String], value: &Value) -> bool {
    if input.is_null() {
        *input = Value::Object(Map::new());
    }
    let Some((last, parents)) = tokens.split_last() else {
        return false;
    };
    let mut cur = input;
    for t in parents {
        let Value::Object(map) = cur else {
            return false;
        };
        cur = map
            .entry(t.clone())
            .or_insert_with(|| Value::Object(Map::new()));
    }
    match cur {
        Value::Object(map) if !map.contains_key(last) => {
            map.insert(last.clone(), value.clone());
            true
        }
        _ => false,
    }
}

/// Calls `f` on every value at `tokens` (`*` matches every child). Returns whether any
/// call changed its value; stops at the first rejection.
fn visit_mut(
    value: &mut Value,
    tokens: &[String],
    f: &mut dyn FnMut(&mut Value) -> Result<bool, Rejection>,
) -> Result<bool, Rejection> {
    let Some((head, rest)) = tokens.split_first() else {
        return f(value);
    };
    let mut changed = false;
    match value {
        Value::Object(map) if head == "*" => {
            for v in map.values_mut() {
                changed |= visit_mut(v, rest, f)?;
            }
        }
        Value::Array(items) if head == "*" => {
            for v in items {
                changed |= visit_mut(v, rest, f)?;
            }
        }
        Value::Object(map) => {
            if let Some(v) = map.get_mut(head.as_str()) {
                changed |= visit_mut(v, rest, f)?;
            }
        }
        Value::Array(items) => {
            if let Some(v) = head.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                changed |= visit_mut(v, rest, f)?;
            }
        }
        _ => {}
    }
    Ok(changed)
}

impl SyncHook for ToolGuardHook {
    fn name(&self) -> &str {
        "ToolGuardHook"
    }

    fn priority(&self) -> i32 {
        20
    }

    fn interest(&self) -> Interest {
        if !self.config.enabled || (self.rules.is_empty() && self.config.deny_when.is_empty()) {
            return Interest::NONE;
        }
        Interest::only(EventKind::PreActing)
    }

    /// Every tool the configuration names (`tools`, `per_tool`, `deny_when`) must be a
    /// tool of the agent; `deny_when` conditions must read declared arguments.
    fn validate_on(&self, site: &HookSite<'_>) -> Result<(), HookError> {
        if !self.config.enabled {
            return Ok(());
        }
        for (i, tool) in self.config.tools.iter().enumerate() {
            site.expect_tool(&format!("tool_guard.tools[{i}]"), tool)?;
        }
        for tool in self.config.per_tool.keys() {
            site.expect_tool(&format!("tool_guard.per_tool.{tool}"), tool)?;
        }
        for (tool, condition) in &self.config.deny_when {
            let key = format!("tool_guard.deny_when.{tool}");
            site.expect_tool(&key, tool)?;
            condition.check_schema(&key, tool, site)?;
        }
        Ok(())
    }

    fn failure_policy(&self) -> FailurePolicy {
        self.config.on_error.policy()
    }

    fn on_event(&self, event: &mut HookEvent) -> Result<(), HookError> {
        let HookEvent::PreActing(e) = event else {
            return Ok(());
        };
        if e.is_denied() {
            return Ok(());
        }
        // Clamped values are logged readable only under the operator's opt-in:
        // `record_content`, or `RevealNumbers` listing the capped field (looked up
        // only when a value is clamped).
        let reveal = |at: &Pointer| {
            e.records_content()
                || e.context()
                    .extensions()
                    .get::<RevealNumbers>()
                    .is_some_and(|r| {
                        let tool = e.tool_use().name.as_str();
                        let pointer = at.pointer_form();
                        r.fields().iter().any(|(t, p)| t == tool && *p == pointer)
                    })
        };
        match self.guard_with(e.tool_use(), &reveal) {
            Ok(Some(guarded)) => e.set_tool_use(guarded),
            Ok(None) => {}
            Err(reason) => {
                tracing::warn!(
                    target: "rein::tool_guard",
                    tool = %e.tool_use().name,
                    tool_call_id = %e.tool_use().id,
                    reason = %reason,
                    "tool call denied"
                );
                e.deny(reason);
            }
        }
        Ok(())
    }
}
