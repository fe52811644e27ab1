//! What a tool's arguments must look like, in one line a model can act on.

use std::fmt::Write as _;

use serde_json::Value;

/// `<tool> expects {"a": string, "b": integer (optional)}`: the top-level properties of
/// an arguments schema with their types, enumerated values (`(one of: x, y)`) and
/// whether they are optional, in the schema's order. A schema without properties gives
/// `<tool> expects a JSON object`. Used in the error results of built-in tools and of
/// arguments refused at admission, so a model that got a call wrong is told exactly what
/// to send instead of retrying the same call.
pub(crate) fn expects(tool: &str, schema: &Value) -> String {
    let Some(properties) = schema
        .get("properties")
        .and_then(Value::as_object)
        .filter(|p| !p.is_empty())
    else {
        return format!("{tool} expects a JSON object");
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut out = format!("{tool} expects {{");
    for (i, (name, prop)) in properties.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        let _ = write!(out, "{}: {}", Value::String(name.clone()), kind(prop));
        if !required.contains(&name.as_str()) {
            out.push_str(" (optional)");
        }
    }
    out.push('}');
    out
}

/// `string`, `integer or null`, `string (one of: a, b)`, `any`.
fn kind(prop: &Value) -> String {
    let mut out = match prop.get("type") {
        Some(Value::String(t)) => t.clone(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join(" or "),
        _ => "any".to_owned(),
    };
    if let Some(Value::Array(values)) = prop.get("enum") {
        let values: Vec<String> = values
            .iter()
            .map(|v| match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            })
            .collect();
        let _ = write!(out, " (one of: {})", values.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_expected_fields_name_types_choices_and_optional_ones() {
        let schema = json!({
            "type": "object",
            "properties": {
                "agent_id": {"type": "string", "enum": ["a", "b"]},
                "task": {"type": "string"},
                "timeout_seconds": {"type": ["integer", "null"]}
            },
            "required": ["agent_id", "task"]
        });
        assert_eq!(
            expects("agent_spawn", &schema),
            r#"agent_spawn expects {"agent_id": string (one of: a, b), "task": string, "timeout_seconds": integer or null (optional)}"#
        );
        assert_eq!(
            expects("t", &json!({"type": "object"})),
            "t expects a JSON object"
        );
    }
}
