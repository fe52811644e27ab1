//! Typed tools: a schema generated from the argument type (nested structs and enums
//! inlined), admitted by the toolkit, arguments deserialized, failures naming the field.

use std::sync::{Arc, Mutex};

use rein::*;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::support::*;

/// How the money goes back.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "snake_case")]
enum Channel {
    Card,
    Wallet,
}

/// A stock-keeping unit: `SKU-` and digits (a rule the schema does not state).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(try_from = "String")]
#[schemars(with = "String")]
struct Sku(String);

impl TryFrom<String> for Sku {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        if s.starts_with("SKU-") {
            Ok(Sku(s))
        } else {
            Err(format!("`{s}` is not a SKU (expected SKU-…)"))
        }
    }
}

/// One refunded line.
#[derive(Debug, Deserialize, JsonSchema)]
struct Item {
    /// The product.
    sku: Sku,
    /// How many.
    quantity: u32,
}

/// Refunds part of an order.
#[derive(Debug, Deserialize, JsonSchema)]
struct RefundArgs {
    /// The order id.
    order: String,
    /// The amount.
    amount: f64,
    /// Where the money goes.
    channel: Channel,
    /// The lines refunded.
    items: Vec<Item>,
    /// A note for the customer.
    note: Option<String>,
}

type Seen = Arc<Mutex<Vec<String>>>;

fn refund(seen: &Seen) -> FunctionTool {
    let seen = Arc::clone(seen);
    FunctionTool::typed("refund", "Refunds an order.", move |args: RefundArgs| {
        let seen = Arc::clone(&seen);
        async move {
            let line = format!(
                "{} {} {:?} {}x{} {:?}",
                args.order,
                args.amount,
                args.channel,
                args.items[0].quantity,
                args.items[0].sku.0,
                args.note
            );
            seen.lock().unwrap().push(line.clone());
            Ok(line)
        }
    })
}

fn contains_key(v: &Value, key: &str) -> bool {
    match v {
        Value::Object(m) => m.contains_key(key) || m.values().any(|v| contains_key(v, key)),
        Value::Array(a) => a.iter().any(|v| contains_key(v, key)),
        _ => false,
    }
}

#[test]
fn a_schema_with_a_nested_struct_and_an_enum_is_inlined_and_admitted_by_the_toolkit() {
    let mut tools = Toolkit::new();
    tools.register(refund(&Seen::default())).unwrap();
    let schema = &tools.schemas()[0].parameters;
    assert_eq!(schema["type"], "object");
    assert!(!contains_key(schema, "$ref"), "{schema:#}");
    assert!(!contains_key(schema, "$defs"), "{schema:#}");
    assert!(schema.get("$schema").is_none(), "{schema:#}");
    assert_eq!(
        schema["required"],
        json!(["order", "amount", "channel", "items"])
    );
    assert_eq!(
        schema["properties"]["channel"]["enum"],
        json!(["card", "wallet"])
    );
    let item = &schema["properties"]["items"]["items"];
    assert_eq!(item["properties"]["quantity"]["type"], "integer");
    assert_eq!(item["properties"]["sku"]["type"], "string");
    assert_eq!(
        schema["properties"]["order"]["description"],
        "The order id."
    );
}

fn args(sku: &str, channel: &str) -> Value {
    json!({
        "order": "A-1",
        "amount": 12.5,
        "channel": channel,
        "items": [{"sku": sku, "quantity": 2}],
        "note": null
    })
}

#[tokio::test]
async fn a_typed_tool_runs_with_its_arguments_deserialized() {
    let seen = Seen::default();
    let model = tool_then_text("refund", args("SKU-7", "wallet"), "done");
    let agent = builder_with_tools(&model, vec![refund(&seen)])
        .build()
        .unwrap();
    agent.call(Msg::user("refund")).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["A-1 12.5 Wallet 2xSKU-7 None"]);
    let results = results_in_request(&model, 1);
    assert!(!results[0].1, "{results:?}");
}

#[tokio::test]
async fn an_argument_the_schema_refuses_is_an_error_result_naming_the_field() {
    let seen = Seen::default();
    let model = tool_then_text("refund", args("SKU-7", "cash"), "done");
    let agent = builder_with_tools(&model, vec![refund(&seen)])
        .build()
        .unwrap();
    agent.call(Msg::user("refund")).await.unwrap();
    assert!(seen.lock().unwrap().is_empty(), "the tool must not run");
    let results = results_in_request(&model, 1);
    assert!(results[0].1, "{results:?}");
    assert!(results[0].2.contains("/channel"), "{results:?}");
}

#[tokio::test]
async fn a_deserialization_failure_is_an_error_result_naming_the_nested_field() {
    let seen = Seen::default();
    let model = tool_then_text("refund", args("X-7", "card"), "done");
    let agent = builder_with_tools(&model, vec![refund(&seen)])
        .build()
        .unwrap();
    agent.call(Msg::user("refund")).await.unwrap();
    assert!(seen.lock().unwrap().is_empty(), "the tool must not run");
    let results = results_in_request(&model, 1);
    assert!(results[0].1, "{results:?}");
    assert!(
        results[0].2.contains("items[0].sku") && results[0].2.contains("not a SKU"),
        "{results:?}"
    );
}

/// A tree of categories: a recursive argument type.
#[derive(Debug, Deserialize, JsonSchema)]
struct Category {
    name: String,
    children: Vec<Category>,
}

#[tokio::test]
async fn a_recursive_argument_type_keeps_a_reference_and_still_validates_and_runs() {
    let tool = FunctionTool::typed("tree", "Counts categories.", |root: Category| async move {
        fn count(c: &Category) -> usize {
            1 + c.children.iter().map(count).sum::<usize>()
        }
        Ok(format!("{} under {}", count(&root), root.name))
    });
    let model = tool_then_text(
        "tree",
        json!({"name": "all", "children": [{"name": "a", "children": []}]}),
        "done",
    );
    let agent = builder_with_tools(&model, vec![tool]).build().unwrap();
    agent.call(Msg::user("count")).await.unwrap();
    let results = results_in_request(&model, 1);
    assert_eq!(results[0].2, "2 under all", "{results:?}");
}
