//! Messages, options and the scripted model.

use futures::StreamExt;
use rein::*;
use serde_json::json;

#[test]
fn messages_round_trip_through_serde() {
    let mut m = Msg::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(Thinking {
                text: "hmm".into(),
                signature: Some("sig".into()),
            }),
            ContentBlock::Text("hi".into()),
            ContentBlock::ToolUse(ToolUse::new("c1", "add", json!({"a": 1}))),
        ],
    )
    .with_name("bot");
    m.metadata.insert("k".into(), json!([1, 2]));
    let back: Msg = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
    let results = Msg::tool([
        ToolResult::error("c1", "add", "bad"),
        ToolResult::new("c2", "x", "ok"),
    ]);
    let back: Msg = serde_json::from_value(serde_json::to_value(&results).unwrap()).unwrap();
    assert_eq!(back, results);
    assert!(back.tool_results()[0].is_error);
    assert!(!back.tool_results()[1].is_error);
}

#[test]
fn msg_accessors_see_text_tool_uses_and_results() {
    let m = Msg::new(
        Role::Assistant,
        vec![
            ContentBlock::Text("a".into()),
            ContentBlock::Thinking(Thinking::default()),
            ContentBlock::ToolUse(ToolUse::new("1", "t", json!({}))),
            ContentBlock::Text("b".into()),
        ],
    );
    assert_eq!(m.text(), "ab");
    assert_eq!(m.tool_uses().len(), 1);
    assert!(m.tool_results().is_empty());
    assert_ne!(Msg::user("x").id, Msg::user("x").id, "ids are unique");
    assert_eq!(ToolResult::new("1", "t", "out").text(), "out");
}

#[test]
fn merge_takes_primary_fields_where_set_and_unions_maps() {
    let mut fallback = GenerateOptions {
        temperature: Some(0.7),
        top_p: Some(0.9),
        max_tokens: Some(100),
        ..Default::default()
    };
    fallback.extra_headers.insert("x-a".into(), "fb".into());
    fallback.extra_headers.insert("x-b".into(), "fb".into());
    fallback.extra_body.insert("k1".into(), json!(1));
    let mut primary = GenerateOptions {
        temperature: Some(0.1),
        reasoning_effort: Some("high".into()),
        ..Default::default()
    };
    primary.extra_headers.insert("x-b".into(), "pr".into());
    primary.extra_body.insert("k2".into(), json!(2));
    let m = GenerateOptions::merge(&primary, &fallback);
    assert_eq!(m.temperature, Some(0.1));
    assert_eq!(m.top_p, Some(0.9));
    assert_eq!(m.max_tokens, Some(100));
    assert_eq!(m.reasoning_effort.as_deref(), Some("high"));
    assert_eq!(m.extra_headers["x-a"], "fb");
    assert_eq!(m.extra_headers["x-b"], "pr");
    assert_eq!(m.extra_body.len(), 2);
    assert_eq!(
        GenerateOptions::merge(&GenerateOptions::default(), &fallback),
        fallback
    );
}

#[tokio::test]
async fn scripted_model_streams_text_in_several_chunks_and_arguments_in_fragments() {
    let model = ScriptedModel::new([
        ScriptedTurn::text("hi"),
        ScriptedTurn::tool_call("add", json!({"a": 1, "b": 2})).with_usage(10, 5),
    ]);
    let chunks: Vec<ModelChunk> = model
        .stream(ModelRequest::default())
        .map(|c| c.unwrap())
        .collect()
        .await;
    let texts: Vec<&ModelChunk> = chunks
        .iter()
        .filter(|c| matches!(c, ModelChunk::Text(_)))
        .collect();
    assert_eq!(
        texts,
        [&ModelChunk::Text("h".into()), &ModelChunk::Text("i".into())]
    );
    let chunks: Vec<ModelChunk> = model
        .stream(ModelRequest::default())
        .map(|c| c.unwrap())
        .collect()
        .await;
    let frags: Vec<String> = chunks
        .iter()
        .filter_map(|c| match c {
            ModelChunk::ToolCall { arguments, .. } => Some(arguments.clone()),
            _ => None,
        })
        .collect();
    assert!(frags.len() >= 2, "{frags:?}");
    assert_eq!(frags.concat(), r#"{"a":1,"b":2}"#);
    assert!(chunks.contains(&ModelChunk::Usage(Usage::new(10, 5))));
    assert_eq!(
        chunks.last(),
        Some(&ModelChunk::Finish(FinishReason::ToolCalls))
    );
}

#[tokio::test]
async fn scripted_model_records_requests_and_errors_when_the_script_runs_out() {
    let model = ScriptedModel::new([ScriptedTurn::text("only")]);
    let clone = model.clone();
    let req = ModelRequest {
        messages: vec![Msg::user("q")].into(),
        ..Default::default()
    };
    let _: Vec<_> = clone.stream(req.clone()).collect().await;
    let second: Vec<_> = model.stream(req).collect().await;
    let err = second[0].as_ref().unwrap_err();
    assert_eq!(err.kind(), ModelErrorKind::Script);
    assert!(err.message().contains("no turn 2"), "{err}");
    assert!(err.message().contains("1 turn"), "{err}");
    assert_eq!(model.requests().len(), 2, "clones share the record");
    assert_eq!(model.requests()[0].messages.first().unwrap().text(), "q");
}

#[tokio::test]
async fn usage_is_summed_over_the_calls_model_calls() {
    let model = ScriptedModel::new([
        ScriptedTurn::tool_call("nope", json!({})).with_usage(10, 2),
        ScriptedTurn::text("ok").with_usage(20, 3),
    ]);
    let agent = Agent::builder()
        .model(model)
        .without_global_hooks()
        .build()
        .unwrap();
    let out = agent
        .run(vec![Msg::user("hi")], RunContext::new())
        .await
        .unwrap();
    assert_eq!(out.usage, Usage::new(30, 5));
    assert_eq!(out.model_calls, 2);
}
