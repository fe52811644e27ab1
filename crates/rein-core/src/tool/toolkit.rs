//! The ordered tool registry and argument validation.

use std::fmt;
use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::Value;

use super::{IntoTool, SharedTool, ToolSchema};

/// Why a toolkit operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ToolkitError {
    /// A tool with this name is already registered (use
    /// [`Toolkit::register_or_replace`] to replace it on purpose).
    #[error("duplicate tool name `{0}`: a tool with this name is already registered")]
    DuplicateName(String),
    /// The tool's parameter schema is not a valid JSON Schema for an arguments object.
    #[error("tool `{tool}` has an invalid parameter schema: {message}")]
    InvalidSchema {
        /// The tool's name.
        tool: String,
        /// What is wrong with the schema.
        message: String,
    },
    /// The tool name is empty or contains characters providers reject.
    #[error("invalid tool name `{0}`: use 1-64 characters from [A-Za-z0-9_.-]")]
    InvalidName(String),
    /// Deletion is disabled on this toolkit.
    #[error("cannot remove tool `{0}`: deletion is disabled on this toolkit")]
    DeletionDisabled(String),
}

/// A registered tool with its schema and compiled validator. Shared between copies.
pub(crate) struct ToolEntry {
    pub(crate) tool: SharedTool,
    pub(crate) schema: ToolSchema,
    /// The tool's declared capabilities, `changes_state` resolved against its effect
    /// class (read once, here).
    pub(crate) capabilities: super::ToolCapabilities,
    validator: jsonschema::Validator,
    /// Top-level properties not listed in `required`, for null pruning.
    optional: Vec<String>,
}

impl fmt::Debug for ToolEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolEntry")
            .field("name", &self.schema.name)
            .finish_non_exhaustive()
    }
}

impl ToolEntry {
    fn new(tool: SharedTool) -> Result<Self, ToolkitError> {
        let name = tool.name().to_owned();
        let valid_name = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid_name {
            return Err(ToolkitError::InvalidName(name));
        }
        let parameters = tool.parameters();
        let invalid = |message: String| ToolkitError::InvalidSchema {
            tool: name.clone(),
            message,
        };
        let Some(obj) = parameters.as_object() else {
            return Err(invalid("the schema must be a JSON object".to_owned()));
        };
        // A typed tool whose argument type the schema cannot express faithfully.
        if let Some(reason) = obj.get(super::typed::REGISTRATION_ERROR_KEY) {
            return Err(invalid(reason.as_str().unwrap_or_default().to_owned()));
        }
        match obj.get("type") {
            None => {}
            Some(Value::String(t)) if t == "object" => {}
            Some(other) => {
                return Err(invalid(format!(
                    "the arguments schema must have \"type\": \"object\", found {other}"
                )));
            }
        }
        let validator =
            jsonschema::validator_for(&parameters).map_err(|e| invalid(e.to_string()))?;
        let required: Vec<&str> = obj
            .get("required")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let optional = obj
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.keys()
                    .filter(|k| !required.contains(&k.as_str()))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let schema = ToolSchema {
            name,
            description: tool.description().to_owned(),
            parameters,
        };
        let mut capabilities = tool.capabilities();
        capabilities
            .changes_state
            .get_or_insert(!matches!(tool.effect_class(), super::EffectClass::ReadOnly));
        Ok(Self {
            tool,
            schema,
            capabilities,
            validator,
            optional,
        })
    }

    /// Turns the model's raw arguments into the value the tool receives, or a message
    /// for the model saying what is wrong (naming the failing field).
    ///
    /// Arguments must be a JSON object (anything else is refused: the agent decodes
    /// double-encoded arguments once, at admission, so hooks and the tool see the same
    /// value). Explicit `null`s for optional top-level properties are dropped before
    /// validation. `Ok(None)`: the arguments are valid as they are (nothing copied);
    /// `Ok(Some(pruned))`: valid once those nulls are dropped.
    pub(crate) fn prepare(&self, input: &Value) -> Result<Option<Value>, String> {
        // Arguments are normalised once, before any hook sees them (the agent decodes
        // double-encoded strings at admission); here a string is what a hook or the
        // model left, and decoding it would run a call no hook saw.
        let Value::Object(map) = input else {
            return Err(format!("expected a JSON object, got {}", json_type(input)));
        };
        // Copied only when an explicit null of an optional property must go.
        let pruned = self
            .optional
            .iter()
            .any(|key| map.get(key).is_some_and(Value::is_null))
            .then(|| {
                let mut map = map.clone();
                map.retain(|key, value| !(value.is_null() && self.optional.contains(key)));
                Value::Object(map)
            });
        let errors = schema_violations(
            &self.validator,
            pruned.as_ref().unwrap_or(input),
            usize::MAX,
        );
        if errors.is_empty() {
            Ok(pruned)
        } else {
            Err(errors.join("; "))
        }
    }
}

/// "a string", "an array", … for messages about a JSON value's type.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// An ordered set of tools, keyed by name.
///
/// - Registration order is the order of [`Toolkit::names`] and of the schemas offered
///   to the model, so requests are deterministic.
/// - Registering a name twice is an error; [`Toolkit::register_or_replace`] replaces on
///   purpose (keeping the original position).
/// - Each tool's parameter schema is validated and compiled at registration.
/// - Deletion can be disabled ([`Toolkit::disable_deletion`]); [`Toolkit::remove`]
///   then returns an error instead of silently doing nothing.
/// - `clone()` (or [`Toolkit::copy`]) gives an independent registry that shares the tool
///   instances.
///
/// An agent takes its own copy at build time, so changing the toolkit afterwards does
/// not affect built agents.
///
/// ```
/// use rein::{FunctionTool, Toolkit, ToolkitError};
/// use serde_json::json;
///
/// let echo = |name: &str| {
///     FunctionTool::new(name, "Echoes.", json!({"type": "object"}), |args| async move {
///         Ok(args.to_string())
///     })
/// };
/// let mut tools = Toolkit::new();
/// tools.register(echo("lookup"))?;
/// tools.register(echo("refund"))?;
/// assert_eq!(tools.names(), ["lookup", "refund"]); // registration order
/// assert_eq!(tools.register(echo("lookup")), Err(ToolkitError::DuplicateName("lookup".into())));
///
/// // A locked copy shares the instances; nothing can be removed from it.
/// let mut locked = tools.clone().without_deletion();
/// assert!(matches!(locked.remove("refund"), Err(ToolkitError::DeletionDisabled(_))));
/// // Narrowing never deletes: it builds a smaller toolkit.
/// assert_eq!(locked.filtered(|name| name != "refund").names(), ["lookup"]);
/// # Ok::<(), ToolkitError>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Toolkit {
    entries: IndexMap<String, Arc<ToolEntry>>,
    deletion_disabled: bool,
}

impl Toolkit {
    /// An empty toolkit with deletion enabled.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers a tool (a value, an `Arc` of one, or a [`SharedTool`]).
    ///
    /// # Errors
    /// [`ToolkitError::DuplicateName`] if the name is taken,
    /// [`ToolkitError::InvalidName`] for an empty or non-portable name, and
    /// [`ToolkitError::InvalidSchema`] if the parameter schema is invalid.
    pub fn register(&mut self, tool: impl IntoTool) -> Result<(), ToolkitError> {
        let entry = ToolEntry::new(tool.into_tool())?;
        if self.entries.contains_key(&entry.schema.name) {
            return Err(ToolkitError::DuplicateName(entry.schema.name.clone()));
        }
        self.entries
            .insert(entry.schema.name.clone(), Arc::new(entry));
        Ok(())
    }

    /// Registers a tool, replacing a same-name tool in place. Returns the replaced tool.
    ///
    /// # Errors
    /// As [`Toolkit::register`], except for duplicates; replacing is refused with
    /// [`ToolkitError::DeletionDisabled`] when deletion is disabled.
    pub fn register_or_replace(
        &mut self,
        tool: impl IntoTool,
    ) -> Result<Option<SharedTool>, ToolkitError> {
        let entry = ToolEntry::new(tool.into_tool())?;
        let name = entry.schema.name.clone();
        if self.deletion_disabled && self.entries.contains_key(&name) {
            return Err(ToolkitError::DeletionDisabled(name));
        }
        Ok(self
            .entries
            .insert(name, Arc::new(entry))
            .map(|old| old.tool.clone()))
    }

    /// Tool names in registration order.
    pub fn names(&self) -> Vec<String> {
        self.entries.keys().cloned().collect()
    }

    /// Tool schemas in registration order.
    pub fn schemas(&self) -> Vec<ToolSchema> {
        self.entries.values().map(|e| e.schema.clone()).collect()
    }

    /// The tool with this name.
    pub fn get(&self, name: &str) -> Option<SharedTool> {
        self.entries.get(name).map(|e| e.tool.clone())
    }

    /// `true` if a tool with this name is registered.
    pub fn contains(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    /// Number of tools.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// `true` if there are no tools.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes a tool. Returns whether it was present. Later tools keep their order.
    ///
    /// # Errors
    /// [`ToolkitError::DeletionDisabled`] if deletion is disabled (whether or not the
    /// tool is present).
    pub fn remove(&mut self, name: &str) -> Result<bool, ToolkitError> {
        if self.deletion_disabled {
            return Err(ToolkitError::DeletionDisabled(name.to_owned()));
        }
        Ok(self.entries.shift_remove(name).is_some())
    }

    /// Disables deletion: [`Toolkit::remove`] and replacing registrations fail from now
    /// on, on this toolkit and its copies.
    pub fn disable_deletion(&mut self) {
        self.deletion_disabled = true;
    }

    /// Builder-style [`Toolkit::disable_deletion`].
    #[must_use]
    pub fn without_deletion(mut self) -> Self {
        self.disable_deletion();
        self
    }

    /// Whether [`Toolkit::remove`] is allowed.
    pub fn deletion_allowed(&self) -> bool {
        !self.deletion_disabled
    }

    /// The same as [`Clone::clone`] (kept from the original contract): an independent
    /// toolkit with the same tools (the instances are shared, not cloned), the same
    /// order and the same deletion setting.
    pub fn copy(&self) -> Toolkit {
        self.clone()
    }

    /// A toolkit with the tools whose names pass `keep`, in order, sharing instances
    /// (and keeping the deletion setting). Nothing is removed from `self`.
    pub fn filtered(&self, mut keep: impl FnMut(&str) -> bool) -> Toolkit {
        Toolkit {
            entries: self
                .entries
                .iter()
                .filter(|(name, _)| keep(name))
                .map(|(name, e)| (name.clone(), Arc::clone(e)))
                .collect(),
            deletion_disabled: self.deletion_disabled,
        }
    }

    pub(crate) fn entry(&self, name: &str) -> Option<&Arc<ToolEntry>> {
        self.entries.get(name)
    }
}

/// The first `limit` ways `value` violates the schema, each naming where (``at `/a/0`:
/// …``, or just the message at the root).
pub(crate) fn schema_violations(
    validator: &jsonschema::Validator,
    value: &Value,
    limit: usize,
) -> Vec<String> {
    validator
        .iter_errors(value)
        .take(limit)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("at `{path}`: {e}")
            }
        })
        .collect()
}
