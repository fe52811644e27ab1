//! The governance fuzzer, round three (issue 31): conditions over every JSON form of a
//! number, and personal data in object keys, in capped arguments and in the reasons and
//! logs built from them.
//!
//! - A random condition (`eq`, `ne`, `gt`, `gte`, `lt`, `lte`) on a random number, the
//!   bound and the argument each written in a random JSON form (integer, float,
//!   exponent, scaled exponent, numeric string, padded string): `ArgCondition::holds`
//!   is the arithmetic truth, and a `deny_when` with it lets the tool run exactly when
//!   it does not hold.
//! - A random argument tree with personal data in keys and values at every depth,
//!   written with random separators (no-break and thin spaces, zero-width characters,
//!   full-width digits): the audit record's `args` and `original_args` hold none of it,
//!   and nothing the default masker detects.
//! - Personal data in a capped argument: the denial reason, the decision trail, the
//!   tool result and every event logged hold none of it.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rein::hooks::{
    ArgCondition, AuditConfig, AuditHook, AuditKind, MemoryAuditSink, SensitiveDataMasker,
    ToolGuardConfig, ToolGuardHook,
};
use rein::*;
use serde_json::{Map, Value, json};

use super::{cases, checked};
use crate::support::capture::Capture;
use crate::support::*;

const OPS: [&str; 6] = ["eq", "ne", "gt", "gte", "lt", "lte"];

/// `hundredths / 100` written in JSON form `form` (0–5). Integral values also get
/// the integer form; a string form is quoted.
fn written(hundredths: i64, form: u8) -> String {
    let integral = hundredths % 100 == 0;
    let whole = hundredths / 100;
    let decimal = format!("{}", hundredths as f64 / 100.0);
    match form % 6 {
        0 if integral => whole.to_string(),
        0 | 1 => {
            if integral {
                format!("{whole}.0")
            } else {
                decimal
            }
        }
        2 => format!("{hundredths}e-2"),
        3 => format!("{}e-3", hundredths * 10),
        4 => format!("\"{decimal}\""),
        _ => format!("\" {decimal} \""),
    }
}

fn arithmetic(op: &str, x: i64, bound: i64) -> bool {
    match op {
        "eq" => x == bound,
        "ne" => x != bound,
        "gt" => x > bound,
        "gte" => x >= bound,
        "lt" => x < bound,
        _ => x <= bound,
    }
}

/// `transfer(amount)`; pushes `"ran"` when it runs.
fn transfer(log: &Log) -> FunctionTool {
    let log = log.clone();
    FunctionTool::new(
        "transfer",
        "Moves money.",
        json!({"type": "object", "properties": {"amount": {"type": ["number", "string"]}}}),
        move |_| {
            let log = log.clone();
            async move {
                log.push("ran");
                Ok("done".to_owned())
            }
        },
    )
}

async fn condition_case(
    op: &'static str,
    x: i64,
    delta: i64,
    arg_form: u8,
    bound_form: u8,
) -> Result<(), TestCaseError> {
    let bound = x + delta;
    // Order bounds are numbers; `eq`/`ne` take any JSON form, strings included.
    let bound_text = if matches!(op, "eq" | "ne") {
        written(bound, bound_form)
    } else {
        written(bound, bound_form % 4)
    };
    let bound_value: Value = serde_json::from_str(&bound_text).unwrap();
    let arg_text = format!(r#"{{"amount": {}}}"#, written(x, arg_form));
    let args: Value = serde_json::from_str(&arg_text).unwrap();
    let condition: ArgCondition =
        serde_json::from_value(json!({"path": "/amount", op: bound_value})).unwrap();
    let expected = arithmetic(op, x, bound);
    checked(1);
    prop_assert_eq!(
        condition.holds(&args),
        expected,
        "{} {} on {}",
        op,
        bound_text,
        arg_text
    );
    let config = ToolGuardConfig {
        enabled: true,
        deny_when: [("transfer".to_owned(), condition)].into(),
        ..ToolGuardConfig::default()
    };
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::raw_tool_call("transfer", arg_text.clone()),
        ScriptedTurn::text("ok"),
    ]);
    let agent = builder_with_tools(&model, vec![transfer(&log)])
        .hook(ToolGuardHook::new(config).unwrap())
        .build()
        .unwrap();
    agent.call(Msg::user("pay")).await.unwrap();
    checked(1);
    prop_assert_eq!(
        log.entries().is_empty(),
        expected,
        "deny_when {} {} on {}: the tool ran = {}",
        op,
        bound_text,
        arg_text,
        !log.entries().is_empty()
    );
    Ok(())
}

/// Personal data the default masker detects, by digits or address.
const PERSONAL: [&str; 8] = [
    "alice@example.com",
    "+44 20 7946 0958",
    "415 555 0134",
    "4111111111111111",
    "13800138000",
    "DE89 3704 0044 0532 0130 00",
    "123-45-6789",
    "(415) 555-0134",
];

/// Separators real text puts inside numbers, written in for a random digit gap.
const SEPARATORS: [&str; 6] = [
    "\u{a0}", "\u{2009}", "\u{202f}", "\u{200b}", "\u{ad}", "\u{2011}",
];

/// `PERSONAL[i]`, its spaces (a card: between its digit groups) written as
/// `SEPARATORS[sep]`, or its digits full-width when `full_width`.
fn personal(i: usize, sep: Option<usize>, full_width: bool) -> String {
    let k = i % PERSONAL.len();
    let base = PERSONAL[k];
    let mut text = match sep.map(|s| SEPARATORS[s % SEPARATORS.len()]) {
        // An IBAN is printed with spaces only.
        Some("\u{2011}") if k == 5 => base.replace(' ', "\u{a0}"),
        Some(s) if k == 3 => ["4111", "1111", "1111", "1111"].join(s),
        Some(s) if matches!(k, 1 | 2 | 5) => base.replace(' ', s),
        _ => base.to_owned(),
    };
    if full_width && !matches!(k, 0 | 5) {
        text = text
            .chars()
            .map(|c| match c {
                '0'..='9' => char::from_u32(c as u32 - '0' as u32 + '０' as u32).unwrap_or(c),
                c => c,
            })
            .collect();
    }
    text
}

/// A random argument tree: objects whose keys and leaf values are plain or personal.
fn tree() -> impl Strategy<Value = Value> {
    let text = (
        0usize..8,
        prop::option::of(0usize..6),
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(i, sep, wide, plain)| {
            if plain {
                Value::String(format!("ok{i}"))
            } else {
                Value::String(personal(i, sep, wide))
            }
        });
    let leaf = prop_oneof![text, (0u32..1000).prop_map(|n| json!(n)), Just(json!(true))];
    leaf.prop_recursive(3, 24, 4, |inner| {
        let key = (
            0usize..8,
            prop::option::of(0usize..6),
            any::<bool>(),
            0u8..3,
        )
            .prop_map(|(i, sep, wide, plain)| {
                if plain > 0 {
                    format!("k{i}{plain}")
                } else {
                    personal(i, sep, wide)
                }
            });
        prop_oneof![
            prop::collection::vec((key, inner.clone()), 1..4)
                .prop_map(|kv| Value::Object(kv.into_iter().collect::<Map<_, _>>())),
            prop::collection::vec(inner, 1..3).prop_map(Value::Array),
        ]
    })
}

/// Every personal text planted in `v` (keys and values).
fn planted(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) if !s.starts_with("ok") => out.push(s.clone()),
        Value::Array(items) => items.iter().for_each(|i| planted(i, out)),
        Value::Object(map) => {
            for (k, v) in map {
                if !k.starts_with('k') {
                    out.push(k.clone());
                }
                planted(v, out);
            }
        }
        _ => {}
    }
}

/// The digits of `s` (ASCII or full-width), for a leak check that ignores separators.
fn digits(s: &str) -> String {
    s.chars()
        .filter_map(|c| match c {
            '0'..='9' => Some(c),
            '０'..='９' => char::from_u32(c as u32 - '０' as u32 + '0' as u32),
            _ => None,
        })
        .collect()
}

async fn audit_case(note: Value) -> Result<(), TestCaseError> {
    let mut secrets = Vec::new();
    planted(&note, &mut secrets);
    let sink = MemoryAuditSink::new();
    let hook = Arc::new(AuditHook::new(
        AuditConfig {
            enabled: true,
            ..AuditConfig::default()
        },
        SensitiveDataMasker::default(),
        Arc::new(sink.clone()),
    ));
    let guard = ToolGuardConfig {
        enabled: true,
        inject_params: [("channel".to_owned(), json!("online"))].into(),
        ..ToolGuardConfig::default()
    };
    let log = Log::default();
    let model = tool_then_text("queryOrder", json!({"order_id": "A-1", "note": note}), "ok");
    let agent = builder_with_tools(&model, vec![query_tool(&log)])
        .hook(ToolGuardHook::new(guard).unwrap())
        .hook(hook.clone())
        .build()
        .unwrap();
    agent.call(Msg::user("look")).await.unwrap();
    hook.flush().await.unwrap();
    let records = sink.records();
    let r = records
        .iter()
        .find(|r| r.kind == AuditKind::ToolCall)
        .ok_or_else(|| TestCaseError::fail("no tool call audited"))?;
    let masker = SensitiveDataMasker::default();
    for (label, v) in [("args", &r.args), ("original_args", &r.original_args)] {
        let v = v
            .as_ref()
            .ok_or_else(|| TestCaseError::fail(format!("no {label}")))?;
        let text = v.to_string();
        let record_digits = digits(&text);
        checked(1);
        for s in &secrets {
            let d = digits(s);
            prop_assert!(
                !text.contains(s.as_str()) && (d.len() < 9 || !record_digits.contains(&d)),
                "{} holds {:?}: {}",
                label,
                s,
                text
            );
        }
        checked(1);
        prop_assert!(
            masker.find(&text).is_empty(),
            "{} still holds detectable data: {}",
            label,
            text
        );
    }
    Ok(())
}

async fn reason_case(secret: String) -> Result<(), TestCaseError> {
    let capture = Capture::default();
    let _installed = capture.install();
    let log = Log::default();
    let guard = ToolGuardConfig {
        enabled: true,
        numeric_caps: [("amount".to_owned(), rein::hooks::CapSpec::Max(1000.0))].into(),
        ..ToolGuardConfig::default()
    };
    let model = tool_then_text("submitRefund", json!({"amount": secret}), "ok");
    let agent = builder_with_tools(&model, vec![refund_tool(&log)])
        .hook(ToolGuardHook::new(guard).unwrap())
        .decision_trail(true)
        .build()
        .unwrap();
    let outcome = agent
        .run(vec![Msg::user("go")], session("s"))
        .await
        .unwrap();
    let d = digits(&secret);
    let leaks =
        |text: &str| text.contains(secret.as_str()) || (d.len() >= 9 && digits(text).contains(&d));
    checked(1);
    prop_assert!(log.entries().is_empty(), "the capped call ran");
    for decision in &outcome.decisions {
        let text = format!("{decision:?}");
        checked(1);
        prop_assert!(!leaks(&text), "the trail quotes the argument: {}", text);
    }
    let result = &results_in_request(&model, 1)[0].2;
    checked(1);
    prop_assert!(
        !leaks(result),
        "the tool result quotes the argument: {}",
        result
    );
    for e in capture.events.lock().unwrap().iter() {
        let text = format!("{} {:?}", e.target, e.fields);
        checked(1);
        prop_assert!(!leaks(&text), "an event quotes the argument: {}", text);
    }
    Ok(())
}

fn block_on(
    f: impl std::future::Future<Output = Result<(), TestCaseError>>,
) -> Result<(), TestCaseError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

fn runner() -> TestRunner {
    TestRunner::new(Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    })
}

#[test]
fn conditions_hold_exactly_when_the_arithmetic_does_for_every_json_form_of_a_number() {
    let strategy = (
        prop::sample::select(OPS.to_vec()),
        prop_oneof![-100_000i64..100_000, (-1000i64..1000).prop_map(|n| n * 100)],
        -1i64..=1,
        0u8..6,
        0u8..6,
    );
    let result = runner().run(&strategy, |(op, x, delta, arg_form, bound_form)| {
        block_on(condition_case(op, x, delta, arg_form, bound_form))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn audit_records_hold_no_personal_data_from_random_keys_and_values_at_any_depth() {
    let result = runner().run(&tree(), |note| block_on(audit_case(note)));
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn no_reason_trail_entry_result_or_log_quotes_personal_data_from_a_capped_argument() {
    let strategy = (0usize..8, prop::option::of(0usize..6), any::<bool>())
        .prop_map(|(i, sep, wide)| format!("call me on {}", personal(i, sep, wide)));
    let result = runner().run(&strategy, |secret| block_on(reason_case(secret)));
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// A structured answer with personal data in random fields: under masking the program
/// gets exactly the value the model gave (never re-asked), and the reply's text shows
/// none of the data the masker detects.
async fn typed_case(card: String, id: u64, note: String) -> Result<(), TestCaseError> {
    #[derive(serde::Deserialize, schemars::JsonSchema, Debug)]
    struct Answer {
        id: u64,
        card: String,
        note: String,
    }
    let answer = json!({"id": id, "card": card, "note": note}).to_string();
    let model = ScriptedModel::new([ScriptedTurn::text(answer)]);
    let masker = SensitiveDataMasker::default();
    let masking = rein::hooks::MaskingHook::new(
        rein::hooks::MaskingConfig {
            enabled: true,
            ..rein::hooks::MaskingConfig::default()
        },
        masker.clone(),
    );
    let agent = builder(&model).hook(masking).build().unwrap();
    let typed = agent
        .run_typed::<Answer>(vec![Msg::user("answer")], RunContext::new())
        .await;
    checked(3);
    let typed = match typed {
        Ok(t) => t,
        Err(e) => return Err(TestCaseError::fail(format!("a valid answer failed: {e}"))),
    };
    prop_assert_eq!(typed.reasks, 0);
    prop_assert_eq!(typed.value.id, id);
    prop_assert_eq!(&typed.value.card, &card);
    prop_assert_eq!(&typed.value.note, &note);
    let text = typed.outcome.reply.text();
    prop_assert!(
        masker.find(&text).is_empty(),
        "the reply's text is masked: {}",
        text
    );
    Ok(())
}

#[test]
fn typed_answers_under_masking_decode_as_given_and_their_text_is_masked() {
    let strategy = (
        prop::sample::select(vec![
            "4111111111111111",
            "4111 1111 1111 1111",
            "5500005555555559",
        ]),
        prop_oneof![Just(4_111_111_111_111_111u64), 0u64..1_000_000],
        prop::sample::select(vec![
            "call +44 20 7946 0958",
            "mail alice@example.com",
            "fine",
        ]),
    );
    let result = runner().run(&strategy, |(card, id, note)| {
        block_on(typed_case(card.to_owned(), id, note.to_owned()))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

/// Stop-for-human after a cap: with a random cap and a random approval threshold, a
/// request for a random amount stops exactly when the capped amount needs approval;
/// the stop lists the capped call, and approving it runs exactly that amount.
async fn capped_stop_case(cap: u32, threshold: u32, asked: u32) -> Result<(), TestCaseError> {
    let log = Log::default();
    let yaml = format!(
        "tool_guard: {{enabled: true, tools: [transfer], numeric_caps: {{amount: {cap}}}}}\n\
         approval: {{enabled: true, mode: stop_for_human, guarded_tools: [transfer], \
         when: {{transfer: {{path: /amount, gt: {threshold}}}}}}}\n\
         latency: {{enabled: false}}\n"
    );
    let config: rein::hooks::HooksConfig = serde_yaml_ng::from_str(&yaml).unwrap();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("transfer", json!({"amount": asked})),
        ScriptedTurn::text("done"),
        ScriptedTurn::text("done"),
    ]);
    let agent = config
        .build()
        .unwrap()
        .install(builder(&model).toolkit(toolkit_with(vec![transfer(&log)])))
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("pay")], session("c"))
        .await
        .unwrap();
    let would_run = asked.min(cap);
    let needs = would_run > threshold;
    checked(2);
    prop_assert_eq!(
        out.reason == StopReason::ReasoningStopped,
        needs,
        "{:?}",
        out.reason
    );
    if needs {
        let waiting = rein::hooks::pending_approvals(&out.reply);
        prop_assert_eq!(waiting.len(), 1);
        prop_assert_eq!(&waiting[0].input["amount"], &json!(would_run));
        prop_assert!(log.entries().is_empty(), "nothing ran before the decision");
        agent
            .resume(
                &key("c"),
                agent::ApprovalDecisions::new().approve_call(&waiting[0]),
            )
            .await
            .unwrap();
    }
    let ran = log.entries();
    checked(1);
    prop_assert_eq!(ran.len(), 1, "{:?}", ran);
    Ok(())
}

#[test]
fn stop_for_human_after_a_cap_decides_on_the_call_that_would_run() {
    let strategy = (1u32..2000, 0u32..2000, 0u32..4000);
    let result = runner().run(&strategy, |(cap, threshold, asked)| {
        block_on(capped_stop_case(cap, threshold, asked))
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
