//! Typed tools: the argument schema generated from a Rust type (`schemars`), the
//! arguments deserialized into it.

use std::future::Future;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{FunctionTool, ToolContext, ToolError};

impl FunctionTool {
    /// A tool whose arguments are a Rust type: the JSON Schema offered to the model is
    /// generated from `T` (`#[derive(Deserialize, JsonSchema)]`, doc comments become
    /// descriptions), and `f` receives the arguments deserialized into `T`.
    ///
    /// The schema is generated once, here, as JSON Schema draft 2020-12 with every
    /// subschema inlined (no `$ref`/`$defs`, which some OpenAI-compatible servers
    /// reject; a recursive type keeps its `$defs`), without the `$schema` key. The
    /// model's arguments are validated against it before `f` runs, like any tool's;
    /// what the schema cannot express and deserialization refuses becomes an error
    /// result naming the field (e.g. ``invalid arguments at `items[0].sku`: …``).
    ///
    /// **What the hooks see is what the tool gets.** Every object in the schema forbids
    /// unknown properties (`additionalProperties: false`) unless the type states its own
    /// rule (a map field, `#[schemars(extend("additionalProperties" = …))]`, or an object
    /// combined with flattened variants, which are left open so the combination still
    /// validates): a property the schema does not name never reaches serde, so a hook's
    /// cap on `amount` cannot be bypassed by a name serde would also accept.
    /// `#[serde(rename)]` and `rename_all` are expressed (the schema uses the names serde
    /// reads). A `#[serde(alias)]` on a field of `T` cannot be: registering the tool
    /// ([`Toolkit::register`](crate::Toolkit::register)) then fails with
    /// [`ToolkitError::InvalidSchema`](crate::ToolkitError::InvalidSchema) naming the
    /// aliases (aliases of nested types are refused by the schema at call time instead).
    ///
    /// ```
    /// use rein::{FunctionTool, Toolkit};
    /// use schemars::JsonSchema;
    /// use serde::Deserialize;
    ///
    /// /// Refunds (part of) an order.
    /// #[derive(Deserialize, JsonSchema)]
    /// struct RefundArgs {
    ///     /// The order id, e.g. `A-1001`.
    ///     order: String,
    ///     /// The amount, in the order's currency.
    ///     amount: f64,
    /// }
    ///
    /// let refund = FunctionTool::typed("refund", "Refunds an order.", |args: RefundArgs| async move {
    ///     Ok(format!("refunded {} on {}", args.amount, args.order))
    /// });
    /// let mut tools = Toolkit::new();
    /// tools.register(refund)?;
    /// let schema = &tools.schemas()[0].parameters;
    /// assert_eq!(schema["properties"]["amount"]["type"], "number");
    /// assert_eq!(schema["required"], serde_json::json!(["order", "amount"]));
    /// # Ok::<(), rein::ToolkitError>(())
    /// ```
    pub fn typed<T, F, Fut>(name: impl Into<String>, description: impl Into<String>, f: F) -> Self
    where
        T: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(T) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        Self::typed_with_context(name, description, move |args: T, _ctx| f(args))
    }

    /// Like [`FunctionTool::typed`], but `f` also receives the [`ToolContext`] (run
    /// ids, extensions, progress emission).
    pub fn typed_with_context<T, F, Fut>(
        name: impl Into<String>,
        description: impl Into<String>,
        f: F,
    ) -> Self
    where
        T: DeserializeOwned + JsonSchema + Send + 'static,
        F: Fn(T, ToolContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<String, ToolError>> + Send + 'static,
    {
        Self::with_context(
            name,
            description,
            tool_schema_for::<T>(),
            move |input, ctx| {
                let call = parse_args::<T>(input).map(|args| f(args, ctx));
                async move { call?.await }
            },
        )
    }
}

/// The arguments schema of `T`: draft 2020-12, subschemas inlined, no `$schema` key.
pub(crate) fn schema_for<T: JsonSchema>() -> Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|s| s.inline_subschemas = true)
        .into_generator();
    let mut schema = Value::from(generator.into_root_schema_for::<T>());
    if let Value::Object(map) = &mut schema {
        map.remove("$schema");
    }
    schema
}

/// The key under which a typed tool's schema carries why it cannot be registered
/// ([`Toolkit::register`](crate::Toolkit::register) refuses such a schema with this
/// message).
pub(crate) const REGISTRATION_ERROR_KEY: &str = "x-rein-registration-error";

/// The arguments schema of a typed tool: [`schema_for`], every object closed
/// (`additionalProperties: false`) where the type sets no rule of its own; or, when `T`
/// accepts serde aliases the schema cannot express, a schema carrying the reason under
/// [`REGISTRATION_ERROR_KEY`].
fn tool_schema_for<T: JsonSchema + DeserializeOwned>() -> Value {
    let mut schema = schema_for::<T>();
    close_objects(&mut schema, false);
    let declared: Vec<&str> = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let aliases: Vec<&str> = struct_fields::<T>()
        .unwrap_or_default()
        .iter()
        .copied()
        .filter(|f| !declared.is_empty() && !declared.contains(f))
        .collect();
    if aliases.is_empty() {
        return schema;
    }
    let listed: Vec<String> = aliases.iter().map(|a| format!("`{a}`")).collect();
    let message = format!(
        "the argument type `{}` accepts the serde alias(es) {}, which its JSON Schema cannot \
         express: hooks would see the alias while the tool receives the field. Remove the \
         alias or use `#[serde(rename = …)]`",
        std::any::type_name::<T>(),
        listed.join(", ")
    );
    serde_json::json!({"type": "object", REGISTRATION_ERROR_KEY: message})
}

/// Sets `additionalProperties: false` on every object schema that declares
/// `properties` and no rule of its own. `flattened`: `value` is a variant combined with
/// its parent's properties (`#[serde(flatten)]`), which must stay open for the
/// combination to validate.
fn close_objects(value: &mut Value, flattened: bool) {
    let Value::Object(map) = value else {
        return;
    };
    let has_properties = map.contains_key("properties");
    let composed = ["allOf", "anyOf", "oneOf"]
        .iter()
        .any(|k| map.contains_key(*k));
    let own_rule = [
        "additionalProperties",
        "unevaluatedProperties",
        "patternProperties",
    ]
    .iter()
    .any(|k| map.contains_key(*k));
    if has_properties && !composed && !flattened && !own_rule {
        map.insert("additionalProperties".to_owned(), Value::Bool(false));
    }
    for (key, child) in map.iter_mut() {
        match key.as_str() {
            "properties" | "$defs" | "definitions" | "patternProperties" => {
                if let Value::Object(children) = child {
                    for c in children.values_mut() {
                        close_objects(c, false);
                    }
                }
            }
            "allOf" | "anyOf" | "oneOf" => {
                if let Value::Array(items) = child {
                    for c in items {
                        close_objects(c, has_properties || flattened);
                    }
                }
            }
            "items"
            | "prefixItems"
            | "additionalProperties"
            | "not"
            | "if"
            | "then"
            | "else"
            | "contains" => match child {
                Value::Array(items) => items.iter_mut().for_each(|c| close_objects(c, false)),
                c => close_objects(c, false),
            },
            _ => {}
        }
    }
}

/// The field names (aliases included) `T`'s derived `Deserialize` reads as a struct, or
/// `None` when `T` is not deserialized as a struct (an enum, a map, flattened fields).
fn struct_fields<T: DeserializeOwned>() -> Option<&'static [&'static str]> {
    let mut seen = None;
    let _ = T::deserialize(FieldProbe(&mut seen));
    seen
}

/// A deserializer that only records the field list a struct asks for, then fails.
struct FieldProbe<'a>(&'a mut Option<&'static [&'static str]>);

#[derive(Debug)]
struct ProbeDone;

impl std::fmt::Display for ProbeDone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("field probe")
    }
}

impl std::error::Error for ProbeDone {}

impl serde::de::Error for ProbeDone {
    fn custom<M: std::fmt::Display>(_: M) -> Self {
        ProbeDone
    }
}

impl<'de> serde::Deserializer<'de> for FieldProbe<'_> {
    type Error = ProbeDone;

    fn deserialize_any<V: serde::de::Visitor<'de>>(self, _: V) -> Result<V::Value, ProbeDone> {
        Err(ProbeDone)
    }

    fn deserialize_struct<V: serde::de::Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, ProbeDone> {
        *self.0 = Some(fields);
        Err(ProbeDone)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
        byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
        identifier ignored_any
    }
}

/// `input` deserialized into `T`, or an error naming the field that failed.
pub(crate) fn parse_args<T: DeserializeOwned>(input: Value) -> Result<T, ToolError> {
    deserialize_at(input).map_err(|e| ToolError::new(format!("invalid arguments{e}")))
}

/// `value` deserialized into `T`, or why not, naming the field: ``" at `items[0].sku`: …"``
/// (or `": …"` at the root), to follow a description of what was read.
pub(crate) fn deserialize_at<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            format!(": {}", e.inner())
        } else {
            format!(" at `{path}`: {}", e.inner())
        }
    })
}
