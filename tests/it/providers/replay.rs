//! Recorded runs replay offline with the same decision trail (`rein::model::replay`,
//! `rein::testing::DecisionTrail`): the committed real run of the refund scenario
//! (`tests/fixtures/recordings/refund.jsonl`, recorded by `examples/record_refund.rs`)
//! replays with its recorded trail; a request that diverges, or one past the end, is a
//! typed error; a bad fixture is a typed error naming file, line and field; what is
//! written is redacted; chunk boundaries survive; finished exchanges are on disk.

use std::path::Path;
use std::sync::Arc;

use futures::StreamExt;
use rein::model::replay::{
    ExchangeEnd, FixtureError, FixtureErrorKind, NoRedaction, PiiRedactor, RecordedChunk,
    Recording, RecordingModel, ReplayError, ReplayModel,
};
use rein::observe::RevealNumbers;
use rein::testing::DecisionTrail;
use rein::*;
use serde_json::json;

use crate::support::TempDir;
use crate::support::refund;

/// The decision trail of a run, as compared with a recording's.
fn trail(outcome: &CallOutcome, messages: &[Msg]) -> DecisionTrail {
    DecisionTrail::new(&outcome.decisions, messages).redacted(&PiiRedactor::default())
}

/// The [`ReplayError`] behind a call's error.
fn replay_error(err: &Error) -> ReplayError {
    let model = err.model_error().expect("a model error");
    assert_eq!(model.kind(), ModelErrorKind::Replay, "{err}");
    std::error::Error::source(model)
        .and_then(|s| s.downcast_ref::<ReplayError>())
        .cloned()
        .unwrap_or_else(|| panic!("no ReplayError behind {err}"))
}

#[tokio::test]
async fn the_recorded_refund_run_replays_offline_with_the_same_decision_trail() {
    let fixture = refund::fixture();
    let model = ReplayModel::open(&fixture, PiiRedactor::default()).unwrap();
    assert_eq!((model.name(), model.provider()), ("local", "openai"));
    let agent = refund::agent(model.clone()).unwrap();
    let (outcome, messages) = refund::run(&agent).await.unwrap();
    let recorded = DecisionTrail::load(DecisionTrail::path_next_to(&fixture)).unwrap();
    let replayed = trail(&outcome, &messages);
    if let Err(diff) = recorded.compare(&replayed) {
        panic!("{diff}");
    }
    // The governance the recording holds: the cap, then the approver's refusal.
    let kinds: Vec<(&str, &str)> = replayed
        .entries()
        .iter()
        .map(|e| (e.kind.as_str(), e.hook.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("tool_input_rewritten", "ToolGuardHook"),
            ("tool_denied", "ApprovalHook")
        ]
    );
    assert_eq!(replayed.entries()[0].changes, ["/amount: 5000 -> 1000"]);
    assert_eq!(
        model.remaining(),
        0,
        "every recorded exchange was asked for"
    );
    assert_eq!(outcome.model_calls as usize, model.served());
}

#[test]
fn the_refund_fixture_holds_no_card_number_or_e_mail_address_of_the_customer() {
    let text = std::fs::read_to_string(refund::fixture()).unwrap();
    let trail = std::fs::read_to_string(DecisionTrail::path_next_to(refund::fixture())).unwrap();
    for leaked in [
        refund::CARD,
        "4111111111111111",
        "4111",
        refund::EMAIL,
        "jane.doe",
    ] {
        assert!(!text.contains(leaked), "the recording holds {leaked}");
        assert!(!trail.contains(leaked), "the trail holds {leaked}");
    }
    assert!(text.contains("My card is [redacted:bank_card]"), "{text}");
    assert!(text.contains("my e-mail is [redacted:email]"), "{text}");
}

#[tokio::test]
async fn a_request_that_diverges_from_the_recording_is_a_replay_error_naming_exchange_and_field() {
    let model = ReplayModel::open(refund::fixture(), PiiRedactor::default()).unwrap();
    let agent = refund::agent(model).unwrap();
    let err = agent
        .run(
            vec![Msg::user("Please refund order A-1002.")],
            RunContext::new().with_session_id("other"),
        )
        .await
        .unwrap_err();
    match replay_error(&err) {
        ReplayError::Diverged {
            exchange,
            field,
            recorded,
            actual,
            fixture,
        } => {
            assert_eq!(
                (exchange, field.as_str()),
                (0, "messages[1].content[0].text")
            );
            assert!(recorded.contains("A-1001") && recorded.contains("[redacted:bank_card]"));
            assert!(actual.contains("A-1002"), "{actual}");
            assert_eq!(fixture, refund::fixture());
        }
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("exchange 0"), "{err}");

    // Tools offered are compared too: one more tool is `tools[1]`.
    let model = ReplayModel::open(refund::fixture(), PiiRedactor::default()).unwrap();
    let mut tools = Toolkit::new();
    tools.register(refund::refund_tool()).unwrap();
    tools
        .register(FunctionTool::new(
            "noop",
            "Does nothing.",
            json!({"type": "object"}),
            |_| async { Ok(String::new()) },
        ))
        .unwrap();
    let agent = Agent::builder()
        .name("support")
        .model(model)
        .sys_prompt(refund::SYSTEM_PROMPT)
        .generate_options(refund::options())
        .toolkit(tools)
        .without_global_hooks()
        .build()
        .unwrap();
    let err = refund::run(&agent).await.unwrap_err();
    let ReplayError::Diverged {
        field, recorded, ..
    } = replay_error(&err)
    else {
        panic!("{err}");
    };
    assert_eq!((field.as_str(), recorded.as_str()), ("tools[1]", "absent"));
}

#[tokio::test]
async fn changed_options_diverge_unless_the_replay_leaves_options_out() {
    let agent_with = |model: ReplayModel| {
        let mut tools = Toolkit::new();
        tools.register(refund::refund_tool()).unwrap();
        Agent::builder()
            .name("support")
            .model(model)
            .sys_prompt(refund::SYSTEM_PROMPT)
            .generate_options(GenerateOptions {
                temperature: Some(0.7),
                ..refund::options()
            })
            .toolkit(tools)
            .without_global_hooks()
            .hook(refund::tool_guard().unwrap())
            .hook(refund::approval().unwrap())
            .hook(RevealNumbers::new().field("submitRefund", "/amount"))
            .decision_trail(true)
            .build()
            .unwrap()
    };
    let strict = ReplayModel::open(refund::fixture(), PiiRedactor::default()).unwrap();
    let err = refund::run(&agent_with(strict)).await.unwrap_err();
    let ReplayError::Diverged {
        field,
        recorded,
        actual,
        ..
    } = replay_error(&err)
    else {
        panic!("{err}");
    };
    assert_eq!(
        (field.as_str(), recorded.as_str(), actual.as_str()),
        ("options.temperature", "0.0", "0.7")
    );

    let lenient = ReplayModel::open(refund::fixture(), PiiRedactor::default())
        .unwrap()
        .compare_options(false);
    let (outcome, messages) = refund::run(&agent_with(lenient)).await.unwrap();
    let recorded = DecisionTrail::load(DecisionTrail::path_next_to(refund::fixture())).unwrap();
    assert!(recorded.compare(&trail(&outcome, &messages)).is_ok());
}

#[tokio::test]
async fn a_request_past_the_end_of_the_recording_is_a_replay_error() {
    let model = ReplayModel::open(refund::fixture(), PiiRedactor::default()).unwrap();
    let agent = refund::agent(model.clone()).unwrap();
    refund::run(&agent).await.unwrap();
    let recorded = model.recording().exchanges.len();
    let err = refund::run(&agent).await.unwrap_err();
    assert_eq!(
        replay_error(&err),
        ReplayError::Exhausted {
            fixture: refund::fixture(),
            exchange: recorded,
            recorded,
        }
    );
}

const HEADER: &str =
    r#"{"format":"rein-recording/1","model":"m","provider":"p","redactor":"none"}"#;
const REQUEST: &str = r#"{"exchange":0,"request":{"messages":[{"role":"user","content":[{"text":"hi"}]}],"tools":[],"options":{}}}"#;
const CHUNK: &str = r#"{"exchange":0,"chunk":{"text":"hello"}}"#;
const END: &str = r#"{"exchange":0,"end":"complete"}"#;

fn parse(lines: &[&str]) -> Result<Recording, FixtureError> {
    Recording::parse(&lines.join("\n"), "bad.jsonl")
}

#[test]
fn a_bad_recording_file_is_a_fixture_error_naming_file_line_and_field() {
    let ok = parse(&[HEADER, REQUEST, CHUNK, END]).unwrap();
    assert_eq!(ok.exchanges.len(), 1);
    assert_eq!(
        ok.exchanges[0].chunks,
        [RecordedChunk::Text("hello".into())]
    );

    let bad_role = REQUEST.replace("\"user\"", "\"robot\"");
    let bad_format = HEADER.replace("/1", "/9");
    let bad_number = REQUEST.replace("\"exchange\":0", "\"exchange\":1");
    let bad_kind = r#"{"exchange":0,"chunk":{"error":{"kind":"bogus","message":"x"}}}"#;
    let cases: Vec<(Vec<&str>, FixtureErrorKind, usize, &str)> = vec![
        (
            vec![&bad_format, REQUEST, END],
            FixtureErrorKind::Field,
            1,
            "format",
        ),
        (
            vec![HEADER, &bad_role, END],
            FixtureErrorKind::Field,
            2,
            "request.messages[0].role",
        ),
        (
            vec![
                HEADER,
                REQUEST,
                r#"{"exchange":0,"chunk":{"txet":"x"}}"#,
                END,
            ],
            FixtureErrorKind::Field,
            3,
            "chunk",
        ),
        (
            vec![HEADER, REQUEST, bad_kind, END],
            FixtureErrorKind::Field,
            3,
            "chunk.error.kind",
        ),
        (
            vec![HEADER, REQUEST, r#"{"exchange":0,"chunk":"#, END],
            FixtureErrorKind::Syntax,
            3,
            "",
        ),
        (
            vec![
                HEADER,
                REQUEST,
                r#"{"exchange":0,"chunk":{"text":"x"},"end":"complete"}"#,
            ],
            FixtureErrorKind::Field,
            3,
            "end",
        ),
        (
            vec![HEADER, REQUEST, CHUNK],
            FixtureErrorKind::Structure,
            3,
            "end",
        ),
        (
            vec![HEADER, &bad_number],
            FixtureErrorKind::Structure,
            2,
            "exchange",
        ),
        (vec![HEADER, CHUNK], FixtureErrorKind::Structure, 2, "chunk"),
        (
            vec![HEADER, REQUEST, r#"{"exchange":0,"end":"error"}"#],
            FixtureErrorKind::Structure,
            3,
            "end",
        ),
    ];
    for (lines, kind, line, field) in cases {
        let err = parse(&lines).unwrap_err();
        assert_eq!(
            (err.kind(), err.line(), err.field()),
            (kind, line, field),
            "{err}"
        );
        assert_eq!(err.path(), Path::new("bad.jsonl"));
        assert!(
            err.to_string().starts_with(&format!("bad.jsonl:{line}")),
            "{err}"
        );
    }
    let missing = ReplayModel::open("no/such/recording.jsonl", NoRedaction).unwrap_err();
    assert_eq!((missing.kind(), missing.line()), (FixtureErrorKind::Io, 0));
    assert!(
        missing.to_string().contains("no/such/recording.jsonl"),
        "{missing}"
    );
}

#[test]
fn a_bad_trail_file_is_a_fixture_error_naming_file_line_and_field() {
    let good = std::fs::read_to_string(DecisionTrail::path_next_to(refund::fixture())).unwrap();
    DecisionTrail::parse(&good, "t.json").unwrap();
    let unknown = good.replacen("\"hook\"", "\"hoook\"", 1);
    let err = DecisionTrail::parse(&unknown, "t.json").unwrap_err();
    let line = unknown.lines().position(|l| l.contains("hoook")).unwrap() + 1;
    assert_eq!(
        (err.kind(), err.line(), err.field()),
        (FixtureErrorKind::Field, line, "decisions[0].hoook")
    );
    assert!(err.message().contains("hoook"), "{err}");
    let version = good.replace("rein-trail/1", "rein-trail/2");
    let err = DecisionTrail::parse(&version, "t.json").unwrap_err();
    assert_eq!(
        (err.kind(), err.line(), err.field()),
        (FixtureErrorKind::Field, 2, "format")
    );
    let err = DecisionTrail::parse("{\n  \"format\": ", "t.json").unwrap_err();
    assert_eq!((err.kind(), err.line()), (FixtureErrorKind::Syntax, 2));
}

#[test]
fn a_trail_mismatch_is_shown_as_a_line_diff() {
    let recorded = DecisionTrail::load(DecisionTrail::path_next_to(refund::fixture())).unwrap();
    let text = recorded.to_json().replace("ApprovalHook", "OtherHook");
    let replayed = DecisionTrail::parse(&text, "replayed").unwrap();
    let diff = recorded.compare(&replayed).unwrap_err().to_string();
    let lines: Vec<&str> = diff.lines().collect();
    assert!(lines[0].contains("2 recorded, 2 replayed"), "{diff}");
    assert!(
        lines[1].starts_with("  = support PreActing tool_input_rewritten by ToolGuardHook"),
        "{diff}"
    );
    assert!(
        lines[2].starts_with(
            "  - support PreActing tool_denied by ApprovalHook on submitRefund (call#1)"
        ),
        "{diff}"
    );
    assert!(
        lines[3].starts_with("  + support PreActing tool_denied by OtherHook"),
        "{diff}"
    );
}

/// The scripted stand-in of a model that repeats the customer's card number (split
/// over several text chunks) and passes the e-mail address as a tool argument.
fn leaky_model() -> ScriptedModel {
    ScriptedModel::new([
        ScriptedTurn::tool_call(
            "submitRefund",
            json!({"order_id": "A-1001", "amount": 5000, "contact": refund::EMAIL}),
        )
        .with_text(format!("Refunding to card {} now.", refund::CARD)),
        ScriptedTurn::text(format!("Denied; we will write to {}.", refund::EMAIL)),
    ])
}

#[tokio::test]
async fn a_scripted_run_records_redacted_and_replays_with_the_same_chunks_and_trail() {
    let dir = TempDir::new("replay-scripted");
    let path = dir.path().join("run.jsonl");
    let recorder =
        Arc::new(RecordingModel::create(leaky_model(), &path, PiiRedactor::default()).unwrap());
    let agent = refund::agent(Arc::clone(&recorder)).unwrap();
    let (outcome, messages) = refund::run(&agent).await.unwrap();
    assert_eq!(recorder.exchanges(), 2);
    let recorded_trail = trail(&outcome, &messages);
    assert!(!recorded_trail.is_empty());

    let text = std::fs::read_to_string(&path).unwrap();
    for leaked in ["4111", "jane.doe"] {
        assert!(!text.contains(leaked), "{leaked} in {text}");
    }
    let recording = Recording::load(&path).unwrap();
    assert_eq!(recording.redactor, "rein-pii+secrets");
    // Same number of chunks as the model streamed; the redacted text is cut at the
    // recorded boundaries (the chunks inside the card number became empty).
    let streamed: Vec<_> = leaky_model()
        .stream(ModelRequest::default())
        .collect()
        .await;
    let first = &recording.exchanges[0];
    assert_eq!(first.chunks.len(), streamed.len());
    let texts: String = first
        .chunks
        .iter()
        .filter_map(|c| match c {
            RecordedChunk::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, "Refunding to card [redacted:bank_card] now.");
    let args: String = first
        .chunks
        .iter()
        .filter_map(|c| match c {
            RecordedChunk::ToolCall { arguments, .. } => Some(arguments.as_str()),
            _ => None,
        })
        .collect();
    let args: serde_json::Value = serde_json::from_str(&args).unwrap();
    assert_eq!(args["contact"], "[redacted:email]");
    assert_eq!(args["amount"], 5000);

    let replay = ReplayModel::open(&path, PiiRedactor::default()).unwrap();
    assert_eq!((replay.name(), replay.provider()), ("scripted", "scripted"));
    let agent = refund::agent(replay.clone()).unwrap();
    let (outcome, messages) = refund::run(&agent).await.unwrap();
    if let Err(diff) = recorded_trail.compare(&trail(&outcome, &messages)) {
        panic!("{diff}");
    }
    assert_eq!(replay.remaining(), 0);
}

#[tokio::test]
async fn a_replay_serves_the_recorded_chunk_boundaries_and_errors_exactly() {
    let dir = TempDir::new("replay-chunks");
    let path = dir.path().join("chunks.jsonl");
    let turns = || {
        [
            ScriptedTurn::tool_call("submitRefund", json!({"order_id": "B-7", "amount": 20}))
                .with_text("Filing the refund for you now.")
                .with_thinking("The customer wants a small refund.")
                .with_usage(120, 30),
            ScriptedTurn::error(ModelError::new(ModelErrorKind::RateLimit, "slow down")),
        ]
    };
    let recorder = RecordingModel::create(ScriptedModel::new(turns()), &path, NoRedaction).unwrap();
    let request = ModelRequest {
        messages: vec![Msg::user("refund B-7")].into(),
        ..ModelRequest::default()
    };
    let live: Vec<_> = recorder.stream(request.clone()).collect().await;
    let failed: Vec<_> = recorder.stream(request.clone()).collect().await;
    let replay = ReplayModel::open(&path, NoRedaction).unwrap();
    let again: Vec<_> = replay.stream(request.clone()).collect().await;
    assert_eq!(again, live, "the same items with the same boundaries");
    let again_failed: Vec<_> = replay.stream(request).collect().await;
    assert_eq!(again_failed, failed);
    assert_eq!(
        again_failed[0].as_ref().unwrap_err().kind(),
        ModelErrorKind::RateLimit
    );
    let recording = Recording::load(&path).unwrap();
    assert_eq!(recording.exchanges[1].end, ExchangeEnd::Error);
}

#[tokio::test]
async fn each_finished_exchange_is_on_disk_at_once_and_a_dropped_stream_is_recorded_as_dropped() {
    let dir = TempDir::new("replay-crash");
    let path = dir.path().join("partial.jsonl");
    let model = ScriptedModel::new([
        ScriptedTurn::text("first answer"),
        ScriptedTurn::text("second answer, never read to its end"),
    ]);
    let recorder = RecordingModel::create(model, &path, NoRedaction).unwrap();
    let _: Vec<_> = recorder.stream(ModelRequest::default()).collect().await;
    // Read while the recorder lives, as after a crash: the finished exchange is there.
    let on_disk = Recording::load(&path).unwrap();
    assert_eq!(on_disk.exchanges.len(), 1);
    assert_eq!(on_disk.exchanges[0].end, ExchangeEnd::Complete);

    let mut second = recorder.stream(ModelRequest::default());
    assert!(second.next().await.is_some());
    drop(second);
    let on_disk = Recording::load(&path).unwrap();
    assert_eq!(on_disk.exchanges.len(), 2);
    assert_eq!(on_disk.exchanges[1].end, ExchangeEnd::Dropped);
    assert_eq!(on_disk.exchanges[1].chunks.len(), 1);
    assert_eq!(recorder.exchanges(), 2);
    assert!(recorder.last_error().is_none());
}
