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

/// A refund whose nested amount accepts the serde alias `amt`.
#[derive(Debug, Deserialize, JsonSchema)]
struct Money {
    #[serde(alias = "amt")]
    amount: f64,
}

#[derive(Debug, Deserialize, JsonSchema)]
struct NestedRefund {
    money: Money,
}

/// Runs one call of the typed tool `t` with `args` under a hook that caps
/// `/money/amount` at 100 (as a hook reading the schema's names would); returns what the
/// tool received, if it ran.
async fn run_nested(args: Value) -> Option<f64> {
    let got: Arc<Mutex<Option<f64>>> = Arc::default();
    let seen = Arc::clone(&got);
    let tool = FunctionTool::typed("refund", "Refunds.", move |a: NestedRefund| {
        let seen = Arc::clone(&seen);
        async move {
            *seen.lock().unwrap() = Some(a.money.amount);
            Ok("ok".to_owned())
        }
    });
    let cap = FnHook::new("cap", |event| {
        if let HookEvent::PreActing(e) = event {
            let mut u = e.tool_use().clone();
            if u.input["money"]["amount"]
                .as_f64()
                .is_some_and(|a| a > 100.0)
            {
                u.input["money"]["amount"] = json!(100);
                e.set_tool_use(u);
            }
        }
        Ok(())
    })
    .on(EventKind::PreActing);
    let model = tool_then_text("refund", args, "done");
    let agent = builder_with_tools(&model, vec![tool])
        .hook(cap)
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    *got.lock().unwrap()
}

#[tokio::test]
async fn what_the_hooks_see_is_what_a_typed_tool_gets_unknown_or_alias_properties_are_refused() {
    assert_eq!(
        run_nested(json!({"money": {"amount": 5000}})).await,
        Some(100.0)
    );
    // The alias would reach serde's `amount` past the cap: the schema refuses it.
    assert_eq!(run_nested(json!({"money": {"amt": 5000}})).await, None);
    assert_eq!(
        run_nested(json!({"money": {"amount": 50, "amt": 5000}})).await,
        None
    );
    assert_eq!(
        run_nested(json!({"money": {"amount": 50}, "extra": 1})).await,
        None
    );
}

#[test]
fn a_typed_tools_schema_closes_every_object_but_keeps_maps_open() {
    #[derive(Deserialize, JsonSchema)]
    #[allow(dead_code)] // only its schema is read
    struct Tagged {
        labels: std::collections::BTreeMap<String, String>,
        money: Money,
    }
    let tool = FunctionTool::typed("t", "T.", |_: Tagged| async { Ok(String::new()) });
    let mut tools = Toolkit::new();
    tools.register(tool).unwrap();
    let schema = &tools.schemas()[0].parameters;
    assert_eq!(schema["additionalProperties"], json!(false), "{schema}");
    assert_eq!(
        schema["properties"]["money"]["additionalProperties"],
        json!(false)
    );
    assert_eq!(
        schema["properties"]["labels"]["additionalProperties"]["type"], "string",
        "a map keeps its value schema: {schema}"
    );
}

#[test]
fn a_top_level_serde_alias_is_refused_at_registration_naming_it() {
    let tool = FunctionTool::typed("m", "M.", |_: Money| async { Ok(String::new()) });
    let err = Toolkit::new().register(tool).unwrap_err();
    assert!(
        matches!(&err, ToolkitError::InvalidSchema { tool, message }
            if tool == "m" && message.contains("`amt`") && message.contains("alias")),
        "{err}"
    );
}

#[tokio::test]
async fn a_serde_rename_is_expressed_in_the_schema_and_runs() {
    #[derive(Deserialize, JsonSchema)]
    struct Renamed {
        #[serde(rename = "amt")]
        amount: f64,
    }
    let got: Arc<Mutex<Option<f64>>> = Arc::default();
    let seen = Arc::clone(&got);
    let tool = FunctionTool::typed("r", "R.", move |a: Renamed| {
        let seen = Arc::clone(&seen);
        async move {
            *seen.lock().unwrap() = Some(a.amount);
            Ok("ok".to_owned())
        }
    });
    let model = tool_then_text("r", json!({"amt": 7}), "done");
    let agent = builder_with_tools(&model, vec![tool]).build().unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(*got.lock().unwrap(), Some(7.0));
    let offered = &model.requests()[0].tools[0].parameters;
    assert!(offered["properties"]["amt"].is_object(), "{offered}");
}

#[tokio::test]
async fn a_typed_tool_with_flattened_fields_still_runs() {
    #[derive(Deserialize, JsonSchema)]
    struct Base {
        order: String,
    }
    #[derive(Deserialize, JsonSchema)]
    struct WithBase {
        #[serde(flatten)]
        base: Base,
        amount: f64,
    }
    let got: Arc<Mutex<Option<String>>> = Arc::default();
    let seen = Arc::clone(&got);
    let tool = FunctionTool::typed("f", "F.", move |a: WithBase| {
        let seen = Arc::clone(&seen);
        async move {
            *seen.lock().unwrap() = Some(format!("{} {}", a.base.order, a.amount));
            Ok("ok".to_owned())
        }
    });
    let model = tool_then_text("f", json!({"order": "A-1", "amount": 3}), "done");
    let agent = builder_with_tools(&model, vec![tool]).build().unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    assert_eq!(got.lock().unwrap().as_deref(), Some("A-1 3"));
}
