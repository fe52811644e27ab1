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
        Self::with_context(name, description, schema_for::<T>(), move |input, ctx| {
            let call = parse_args::<T>(input).map(|args| f(args, ctx));
            async move { call?.await }
        })
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
