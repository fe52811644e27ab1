//! MaskedStream: every item of a masked stream is masked (subagents' events included,
//! each agent with its own carry-over), and the carry limit never splits a number into
//! two unmasked halves.

use futures::StreamExt;
use proptest::prelude::*;
use rein::hooks::{MaskedStream, MaskingConfig, MaskingHook, SensitiveDataMasker};
use rein::*;
use serde_json::json;

use crate::support::*;

const PHONE: &str = "13800138000";
const OTHER_PHONE: &str = "13900139000";
const CARD: &str = "4111111111111111";
const MAIL: &str = "li.wei@example.com";

fn masking_hook() -> MaskingHook {
    MaskingHook::new(
        MaskingConfig {
            enabled: true,
            ..MaskingConfig::default()
        },
        SensitiveDataMasker::default(),
    )
}

async fn masked(events: Vec<AgentEvent>, limit: usize) -> Vec<AgentEvent> {
    MaskedStream::new(
        futures::stream::iter(events),
        SensitiveDataMasker::default(),
        limit,
    )
    .collect()
    .await
}

fn sub(path: &str, event: AgentEvent) -> AgentEvent {
    AgentEvent::Subagent {
        path: path.into(),
        event: Box::new(event),
    }
}

/// The text deltas of the agent at `path` (`None`: the top-level agent), concatenated.
fn deltas_of(events: &[AgentEvent], path: Option<&str>) -> String {
    let mut out = String::new();
    for e in events {
        match (e, path) {
            (AgentEvent::TextDelta(t), None) => out.push_str(t),
            (AgentEvent::Subagent { path: p, event }, Some(want)) if p == want => {
                if let AgentEvent::TextDelta(t) = &**event {
                    out.push_str(t);
                }
            }
            _ => {}
        }
    }
    out
}

fn assert_no_personal_data(events: &[AgentEvent]) {
    for e in events {
        let shown = format!("{e:?}");
        for secret in [PHONE, OTHER_PHONE, CARD, MAIL, "1380013", "0013 8000"] {
            assert!(!shown.contains(secret), "{secret} leaked in {shown}");
        }
    }
}

#[tokio::test]
async fn a_subagents_streamed_text_tool_calls_and_results_are_masked() {
    let log = Log::default();
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call(
            SPAWN_TOOL,
            json!({"agent_id": "analyst", "task": format!("look up {PHONE}")}),
        ),
        ScriptedTurn::tool_call("queryOrder", json!({"order_id": OTHER_PHONE})),
        ScriptedTurn::text(format!(
            "the customer is {PHONE}, card {CARD}, mail {MAIL}."
        )),
        ScriptedTurn::text(format!("done; reach {PHONE}")),
    ]);
    let hook = masking_hook();
    let agent = builder(&model)
        .name("support")
        .toolkit(toolkit_with(vec![query_tool(&log)]))
        .subagent(
            SubagentDeclaration::builder("analyst")
                .description("looks orders up")
                .tools(["queryOrder"])
                .build()
                .unwrap(),
        )
        .hook(hook.clone())
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = hook
        .mask_stream(agent.stream(vec![Msg::user("go")], RunContext::new()))
        .collect()
        .await;
    // The tool ran with the real arguments; only the streamed copy is masked.
    assert_eq!(log.entries(), [format!("query:{OTHER_PHONE}")]);
    assert_no_personal_data(&events);
    assert_eq!(
        deltas_of(&events, Some("support/analyst")),
        "the customer is ***, card ***, mail ***."
    );
    let child_items: Vec<&AgentEvent> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Subagent { event, .. } => Some(&**event),
            _ => None,
        })
        .collect();
    assert!(child_items.iter().any(|e| matches!(e,
        AgentEvent::ToolCall(u) if u.input == json!({"order_id": "***"}))));
    assert!(child_items.iter().any(|e| matches!(e,
        AgentEvent::ToolResult(r) if r.content == "order ***: shipped; contact ***")));
    assert!(
        matches!(events.last(), Some(AgentEvent::Final(o)) if o.reply.text() == "done; reach ***")
    );
}

#[tokio::test]
async fn every_kind_of_item_a_masked_stream_yields_is_masked() {
    let reply = Msg::new(
        Role::Assistant,
        vec![
            ContentBlock::Text(format!("call {PHONE}")),
            ContentBlock::Thinking(Thinking {
                text: format!("mail {MAIL}"),
                signature: None,
            }),
            ContentBlock::ToolUse(ToolUse::new("c1", "pay", json!({ "card": CARD }))),
            ContentBlock::ToolResult(ToolResult::new("c1", "pay", format!("paid {CARD}"))),
        ],
    );
    let outcome = agent_outcome(reply).await;
    let inner = || {
        vec![
            AgentEvent::ThinkingDelta(format!("thinking of {PHONE} ")),
            AgentEvent::TextDelta(format!("text {PHONE}")),
            AgentEvent::ToolCallStart {
                id: "c1".into(),
                name: "pay".into(),
            },
            AgentEvent::ToolCall(ToolUse::new(
                "c1",
                "pay",
                json!({"card": CARD, "nested": [{"mail": MAIL}], PHONE: 1}),
            )),
            AgentEvent::ToolProgress {
                id: "c1".into(),
                text: format!("charging {CARD}"),
            },
            AgentEvent::ToolResult(ToolResult::new("c1", "pay", format!("paid {CARD}"))),
            AgentEvent::ReasoningRedone,
        ]
    };
    let mut events = inner();
    events.extend(inner().into_iter().map(|e| sub("a/b", e)));
    // A doubly wrapped event is masked too.
    events.extend(inner().into_iter().map(|e| sub("a", sub("a/b/c", e))));
    events.push(sub("a/b", AgentEvent::Final(outcome.clone())));
    events.push(AgentEvent::Final(outcome));
    let out = masked(events, 256).await;
    assert_no_personal_data(&out);
    let shown = format!("{out:?}");
    assert!(shown.contains("***"), "{shown}");
    assert!(
        out.iter().any(|e| matches!(e, AgentEvent::Subagent { path, event }
            if path == "a" && matches!(&**event, AgentEvent::Subagent { path, .. } if path == "a/b/c"))),
        "the wrapping is kept"
    );
}

/// A real outcome (its type cannot be built outside the crate) with this reply: a
/// PostCall hook swaps the reply in.
async fn agent_outcome(reply: Msg) -> CallOutcome {
    let model = ScriptedModel::new([ScriptedTurn::text("x")]);
    let agent = builder(&model)
        .hook(
            FnHook::new("swap", move |e| {
                if let HookEvent::PostCall(e) = e {
                    e.set_final_message(reply.clone());
                }
                Ok(())
            })
            .on(EventKind::PostCall),
        )
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = agent
        .stream(vec![Msg::user("hi")], RunContext::new())
        .collect()
        .await;
    match events.into_iter().last() {
        Some(AgentEvent::Final(o)) => o,
        other => panic!("no final item: {other:?}"),
    }
}

#[tokio::test]
async fn an_error_item_of_a_masked_stream_is_masked() {
    let model = ScriptedModel::new([ScriptedTurn::text("x")]);
    let hook = masking_hook();
    let agent = builder(&model)
        .hook(
            FnHook::new("refuse", |_| {
                Err(HookError::new(format!("refused for {PHONE}")))
            })
            .on(EventKind::PreCall),
        )
        .build()
        .unwrap();
    let events: Vec<AgentEvent> = hook
        .mask_stream(agent.stream(vec![Msg::user("hi")], RunContext::new()))
        .collect()
        .await;
    match events.last() {
        Some(AgentEvent::Error(e)) => {
            let shown = e.to_string();
            assert!(shown.contains("refused for ***"), "{shown}");
            assert_eq!(e.hook_name(), Some("refuse"));
        }
        other => panic!("expected an error item, got {other:?}"),
    }
}

#[tokio::test]
async fn interleaved_subagent_deltas_keep_separate_carries() {
    let events = vec![
        sub("p/a", AgentEvent::TextDelta("a: 1380013".into())),
        sub("p/b", AgentEvent::TextDelta("b: 1390013".into())),
        AgentEvent::TextDelta("top: 13700".into()),
        sub("p/a", AgentEvent::TextDelta("8000。".into())),
        sub("p/b", AgentEvent::TextDelta("9000。".into())),
        AgentEvent::TextDelta("137000。".into()),
    ];
    let out = masked(events, 256).await;
    assert_eq!(deltas_of(&out, Some("p/a")), "a: ***。");
    assert_eq!(deltas_of(&out, Some("p/b")), "b: ***。");
    assert_eq!(deltas_of(&out, None), "top: ***。");
}

#[tokio::test]
async fn a_subagents_carry_is_flushed_by_its_final_item_and_the_stream_end() {
    let events = vec![
        sub("p/a", AgentEvent::TextDelta("a: 1380013".into())),
        sub("p/b", AgentEvent::TextDelta("b: 8000".into())),
        sub("p/a", AgentEvent::ReasoningRedone),
    ];
    let out: Vec<String> = masked(events, 256)
        .await
        .iter()
        .map(|e| format!("{e:?}"))
        .collect();
    assert_eq!(out.len(), 5, "{out:?}");
    assert!(out[0].contains("\"a: \""), "{out:?}");
    assert!(out[1].contains("\"b: \""), "{out:?}");
    assert!(
        out[2].contains("\"1380013\""),
        "flushed before the redo: {out:?}"
    );
    assert!(out[3].contains("ReasoningRedone"), "{out:?}");
    assert!(out[4].contains("\"8000\""), "flushed at the end: {out:?}");
}

#[tokio::test]
async fn a_number_straddling_the_carry_limit_is_not_emitted_in_two_unmasked_halves() {
    // The reproduction: 261 bytes of `12 12 12 …`, then `1380013` | `8000`.
    let head = "12 ".repeat(87);
    let events = vec![
        AgentEvent::TextDelta(format!("{head}1380013")),
        AgentEvent::TextDelta("8000".into()),
        AgentEvent::TextDelta("。".into()),
    ];
    let out = masked(events, 256).await;
    let texts: Vec<&str> = out
        .iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert!(
        texts
            .iter()
            .all(|t| !t.contains("1380013") && !t.contains("8000")),
        "{texts:?}"
    );
    assert_eq!(texts.concat(), format!("{head}***。"));
    // The text before the unfinished number went out at the overflow.
    assert_eq!(texts[0], head);
}

#[tokio::test]
async fn an_over_long_token_is_masked_whole_rather_than_split() {
    let local = "a".repeat(100);
    let text = format!("mail {local}@example.com now");
    let events: Vec<AgentEvent> = text
        .as_bytes()
        .chunks(10)
        .map(|c| AgentEvent::TextDelta(String::from_utf8(c.to_vec()).unwrap()))
        .collect();
    let out = masked(events, 16).await;
    let concat = deltas_of(&out, None);
    assert_eq!(concat, "mail *** now");
}

#[tokio::test]
async fn a_small_carry_limit_still_holds_back_an_unfinished_number() {
    let events = vec![
        AgentEvent::TextDelta("电话1380013".into()),
        AgentEvent::TextDelta("8000 后续".into()),
    ];
    let out = masked(events, 4).await;
    let texts: Vec<String> = out
        .into_iter()
        .filter_map(|e| match e {
            AgentEvent::TextDelta(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["电话", "*** 后续"]);
}

// ---------- property: streamed masking never leaks ----------

const PERSONAL: &[&str] = &[
    PHONE,
    "+86 138 0013 8000",
    "138-0013-8000",
    "11010519491231002X",
    CARD,
    "4111 1111 1111 1111",
    MAIL,
    "user13900139000@x.com",
    "+1 (415) 555-0134",
    "+44 20 7946 0958",
    "(415) 555-0134",
    "DE89 3704 0044 0532 0130 00",
    "GB29 NWBK 6016 1331 9268 19",
    "123-45-6789",
];

const FILLER: &[&str] = &[
    " ",
    "，",
    "。",
    "\n",
    "12 ",
    "1 ",
    "-",
    ".",
    "x",
    "abc",
    "a@",
    "@",
    "+",
    "电话",
    "9",
    "X",
    "(",
    ")",
    "AB ",
    "+1 ",
    "12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 ",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "99999999999999999999999999999999",
    "a-b-c-d-e-f-g-h-i-j-k-l-m-n-o-p-q-",
];

fn piece() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        1 => proptest::sample::select(PERSONAL),
        3 => proptest::sample::select(FILLER),
    ]
}

/// Splits `text` into chunks at char boundaries after the given sizes (cycled).
fn chunk(text: &str, sizes: &[usize]) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut k = 0;
    for c in text.chars() {
        cur.push(c);
        if cur.len() >= sizes[k % sizes.len()] {
            out.push(std::mem::take(&mut cur));
            k += 1;
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

fn stream_masked(chunks: &[String], limit: usize) -> String {
    let events = chunks
        .iter()
        .map(|c| AgentEvent::TextDelta(c.clone()))
        .collect();
    let out = futures::executor::block_on(masked(events, limit));
    deltas_of(&out, None)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn streamed_masking_never_leaks_what_masking_the_whole_text_masks(
        pieces in proptest::collection::vec(piece(), 1..40),
        sizes in proptest::collection::vec(1usize..40, 1..8),
        limit in prop_oneof![Just(0usize), Just(1), Just(3), Just(8), Just(16), Just(64), Just(256)],
    ) {
        let m = SensitiveDataMasker::default();
        let text: String = pieces.concat();
        let whole = m.mask(&text).into_owned();
        let concat = stream_masked(&chunk(&text, &sizes), limit);
        for p in PERSONAL {
            if text.contains(p) && !whole.contains(p) {
                prop_assert!(!concat.contains(p), "{p} leaked: {concat:?} (limit {limit})");
            }
        }
        // Whatever the stream leaves detectable, masking the whole text leaves in clear
        // too. (Not "nothing is detectable": masking an over-long token whole can put a
        // `+44 …` that followed a digit after `***`, where it reads as a number on its
        // own; the whole-text masker leaves the same digits in clear.)
        for found in m.find(&concat) {
            let clear = &concat[found.range.clone()];
            prop_assert!(
                whole.contains(clear),
                "{clear:?} is in clear in the stream but masked in the whole text: \
                 {concat:?} vs {whole:?} (limit {limit})"
            );
        }
        // Without overflow the stream is exact.
        let exact = stream_masked(&chunk(&text, &sizes), text.len() + 1);
        prop_assert_eq!(exact, whole);
    }
}

#[test]
fn a_card_number_running_into_an_email_never_leaks_the_address_at_any_carry_limit() {
    let pieces = [
        "，",
        " ",
        "+86 138 0013 8000",
        "4111 1111 1111 1111",
        "+86 138 0013 8000",
        " ",
        "，",
        "a-b-c-d-e-f-g-h-i-j-k-l-m-n-o-p-q-",
        "user13900139000@x.com",
        "11010519491231002X",
        " ",
        "99999999999999999999999999999999",
        " ",
        "，",
        "+86 138 0013 8000",
        "a-b-c-d-e-f-g-h-i-j-k-l-m-n-o-p-q-",
        "99999999999999999999999999999999",
        "，",
        "电话",
        "，",
        " ",
        " ",
        "a-b-c-d-e-f-g-h-i-j-k-l-m-n-o-p-q-",
        "12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 12 ",
        "4111 1111 1111 1111",
        "-",
        "li.wei@example.com",
    ];
    let m = SensitiveDataMasker::default();
    let text: String = pieces.concat();
    let whole = m.mask(&text).into_owned();
    let mut bad = Vec::new();
    for limit in [0usize, 1, 3, 8, 16, 64, 256] {
        for size in [1usize, 3, 7, 14, 20, 39] {
            let concat = stream_masked(&chunk(&text, &[size]), limit);
            for p in PERSONAL {
                if text.contains(p) && !whole.contains(p) && concat.contains(p) {
                    bad.push((limit, size, p));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{bad:?}");
    let concat = stream_masked(&chunk(&text, &[14]), 0);
    if m.find(&whole).is_empty() {
        assert!(m.find(&concat).is_empty(), "{concat:?}");
    }
    let exact = stream_masked(&chunk(&text, &[14]), text.len() + 1);
    assert_eq!(exact, whole);
}
