//! `AnthropicModel`: the exact request body, and realistic Messages API transcripts
//! replayed by the local server.

use rein::*;
use serde_json::{Value, json};

use crate::providers::mock::*;
use crate::support::*;

fn message_start(input_tokens: u64) -> String {
    message_start_cached(input_tokens, 0)
}

fn message_start_cached(input_tokens: u64, cache_read: u64) -> String {
    event(json!({"type": "message_start", "message": {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "content": [], "model": "claude-sonnet-4-5-20250929", "stop_reason": null,
        "stop_sequence": null,
        "usage": {"input_tokens": input_tokens, "cache_creation_input_tokens": 0,
                  "cache_read_input_tokens": cache_read, "output_tokens": 1}}}))
}

fn block_start(index: u32, block: Value) -> String {
    event(json!({"type": "content_block_start", "index": index, "content_block": block}))
}

fn delta(index: u32, delta: Value) -> String {
    event(json!({"type": "content_block_delta", "index": index, "delta": delta}))
}

fn text_delta(index: u32, text: &str) -> String {
    delta(index, json!({"type": "text_delta", "text": text}))
}

fn block_stop(index: u32) -> String {
    event(json!({"type": "content_block_stop", "index": index}))
}

fn message_delta(stop_reason: &str, output_tokens: u64) -> String {
    event(json!({"type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": output_tokens}}))
}

fn message_stop() -> String {
    event(json!({"type": "message_stop"}))
}

fn ping() -> String {
    "event: ping\ndata: {\"type\": \"ping\"}\n\n".to_owned()
}

fn model(server: &MockServer) -> AnthropicModel {
    AnthropicModel::builder()
        .base_url(&server.url)
        .api_key("sk-ant-test")
        .model("claude-test")
        .http(fast_http(2))
        .build()
        .unwrap()
}

fn text_reply(text: &str) -> Reply {
    Reply::sse(&[
        message_start(10),
        block_start(0, json!({"type": "text", "text": ""})),
        text_delta(0, text),
        block_stop(0),
        message_delta("end_turn", 3),
        message_stop(),
    ])
}

#[tokio::test]
async fn the_request_body_maps_system_messages_tools_and_options_exactly() {
    let server = MockServer::start([text_reply("ok")]).await;
    let unsigned = Msg::new(
        Role::Assistant,
        vec![
            ContentBlock::Thinking(Thinking {
                text: "from another provider".into(),
                signature: None,
            }),
            ContentBlock::Text("11.".into()),
        ],
    );
    let mut options = GenerateOptions {
        top_p: Some(0.9),
        top_k: Some(40),
        seed: Some(7),
        stop: Some(vec!["END".into()]),
        frequency_penalty: Some(0.1),
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        ..Default::default()
    };
    options.extra_headers.insert(
        "anthropic-beta".into(),
        "interleaved-thinking-2025-05-14".into(),
    );
    options
        .extra_body
        .insert("metadata".into(), json!({"user_id": "u-42"}));
    let request = ModelRequest {
        messages: [
            two_sums("toolu", Some("sig-1")),
            vec![
                Msg::user("Now 5+6?"),
                Msg::system("Answer in English."),
                unsigned,
                Msg::user("Thanks"),
            ],
        ]
        .concat()
        .into(),
        tools: vec![add_schema_tool()].into(),
        options,
    };
    let m = model(&server);
    assert_eq!(text_of(&stream_ok(&m, request.clone()).await), "ok");
    let expected = json!({
        "model": "claude-test",
        "stream": true,
        "max_tokens": 4096,
        "system": "Be brief.\n\nAnswer in English.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "What is 1+2 and 3+4?"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "two sums", "signature": "sig-1"},
                {"type": "text", "text": "Adding."},
                {"type": "tool_use", "id": "toolu_1", "name": "add", "input": {"a": 1, "b": 2}},
                {"type": "tool_use", "id": "toolu_2", "name": "add", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "3"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "Invalid arguments",
                 "is_error": true},
                {"type": "text", "text": "Now 5+6?"}
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "11."}]},
            {"role": "user", "content": [{"type": "text", "text": "Thanks"}]}
        ],
        "tools": [{"name": "add", "description": "Adds two numbers.", "input_schema": add_schema()}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["END"],
        "metadata": {"user_id": "u-42"}
    });
    let sent = &server.requests()[0];
    assert_eq!(sent.body, expected);
    assert_eq!(m.request_body(&request).unwrap(), expected);
    assert_eq!(sent.path, "/v1/messages");
    assert_eq!(sent.headers["x-api-key"], "sk-ant-test");
    assert_eq!(sent.headers["anthropic-version"], "2023-06-01");
    assert_eq!(
        sent.headers["anthropic-beta"],
        "interleaved-thinking-2025-05-14"
    );
}

#[tokio::test]
async fn max_tokens_defaults_to_the_builders_value_since_the_api_requires_it() {
    let m = AnthropicModel::builder()
        .model("claude-test")
        .max_tokens(1000)
        .version("2024-01-01")
        .build()
        .unwrap();
    let body = m.request_body(&ask("hi")).unwrap();
    assert_eq!(body["max_tokens"], 1000);
    assert!(body.get("thinking").is_none());
    assert!(body.get("system").is_none());
    let mut request = ask("hi");
    request.options.max_tokens = Some(5000);
    request.options.reasoning_effort = Some("2048".into());
    let body = m.request_body(&request).unwrap();
    assert_eq!(body["max_tokens"], 5000);
    assert_eq!(body["thinking"]["budget_tokens"], 2048);
    request.options.reasoning_effort = Some("none".into());
    assert!(m.request_body(&request).unwrap().get("thinking").is_none());
    assert_eq!(m.url(), "https://api.anthropic.com/v1/messages");
    assert_eq!((m.name(), m.provider()), ("claude-test", "anthropic"));
}

#[tokio::test]
async fn an_unknown_reasoning_effort_is_a_bad_request_before_anything_is_sent() {
    let server = MockServer::start([text_reply("never")]).await;
    let mut request = ask("hi");
    request.options.reasoning_effort = Some("extreme".into());
    let (_, err) = collect(&model(&server), request).await;
    let err = err.unwrap();
    assert_eq!(err.kind(), ModelErrorKind::BadRequest);
    assert!(err.message().contains("extreme"), "{err}");
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_plain_text_transcript_streams_text_usage_and_the_stop_reason() {
    let chunks = replay(
        model,
        &[
            message_start(25),
            block_start(0, json!({"type": "text", "text": ""})),
            ping(),
            text_delta(0, "Hello"),
            text_delta(0, "! How can I help?"),
            block_stop(0),
            message_delta("end_turn", 15),
            message_stop(),
        ],
    )
    .await;
    let usage = |i, o| ModelChunk::Usage(Usage::new(i, o));
    assert_eq!(
        chunks,
        vec![
            usage(25, 1),
            ModelChunk::Text("Hello".into()),
            ModelChunk::Text("! How can I help?".into()),
            ModelChunk::Finish(FinishReason::Stop),
            usage(25, 15),
        ]
    );
}

#[tokio::test]
async fn prompt_tokens_read_from_the_cache_are_counted_as_input_and_reported_as_cached() {
    let chunks = replay(
        model,
        &[
            message_start_cached(25, 2000),
            block_start(0, json!({"type": "text", "text": ""})),
            text_delta(0, "Hi"),
            block_stop(0),
            message_delta("end_turn", 15),
            message_stop(),
        ],
    )
    .await;
    let usage = Usage {
        cached_input_tokens: 2000,
        ..Usage::new(2025, 15)
    };
    assert_eq!(chunks.last(), Some(&ModelChunk::Usage(usage)));
}

fn thinking_then_text() -> Vec<String> {
    vec![
        message_start(40),
        block_start(0, json!({"type": "thinking", "thinking": ""})),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "Let me solve this step by step:\n\n1. "}),
        ),
        delta(
            0,
            json!({"type": "thinking_delta", "thinking": "27 * 453 = 12231"}),
        ),
        delta(
            0,
            json!({"type": "signature_delta", "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"}),
        ),
        block_stop(0),
        block_start(1, json!({"type": "text", "text": ""})),
        text_delta(1, "27 * 453 = 12,231"),
        block_stop(1),
        message_delta("end_turn", 120),
        message_stop(),
    ]
}

#[tokio::test]
async fn thinking_deltas_and_the_signature_stream_before_the_text() {
    let chunks = replay(model, &thinking_then_text()).await;
    assert_eq!(
        &chunks[1..5],
        [
            ModelChunk::Thinking("Let me solve this step by step:\n\n1. ".into()),
            ModelChunk::Thinking("27 * 453 = 12231".into()),
            ModelChunk::ThinkingSignature("EqQBCgIYAhIM1gbcDa9GJwZA2b3h".into()),
            ModelChunk::Text("27 * 453 = 12,231".into()),
        ]
    );
}

/// Text, then two `tool_use` blocks whose input arrives in `input_json_delta` pieces;
/// block indexes from `first` (no `message_start`).
fn two_tool_uses(first: u32) -> Vec<String> {
    let json_delta = |i, s: &str| delta(i, json!({"type": "input_json_delta", "partial_json": s}));
    let (t, a, b) = (first, first + 1, first + 2);
    vec![
        block_start(t, json!({"type": "text", "text": ""})),
        text_delta(t, "Let me add both."),
        block_stop(t),
        block_start(
            a,
            json!({"type": "tool_use", "id": "toolu_01A", "name": "add", "input": {}}),
        ),
        json_delta(a, ""),
        json_delta(a, "{\"a\": 1"),
        json_delta(a, ", \"b\": 2}"),
        block_stop(a),
        block_start(
            b,
            json!({"type": "tool_use", "id": "toolu_01B", "name": "add", "input": {}}),
        ),
        json_delta(b, "{\"a\": 3, "),
        json_delta(b, "\"b\": 4}"),
        block_stop(b),
        message_delta("tool_use", 89),
        message_stop(),
    ]
}

#[tokio::test]
async fn two_tool_use_blocks_stream_as_tool_call_fragments_indexed_by_block() {
    let mut events = vec![message_start(472)];
    events.extend(two_tool_uses(0));
    let chunks = replay(model, &events).await;
    let calls: Vec<_> = chunks
        .iter()
        .filter(|c| matches!(c, ModelChunk::ToolCall { .. }))
        .cloned()
        .collect();
    let call = |index, id: Option<&str>, args: &str| ModelChunk::ToolCall {
        index,
        id: id.map(Into::into),
        name: id.map(|_| "add".into()),
        arguments: args.into(),
    };
    assert_eq!(
        calls,
        [
            call(1, Some("toolu_01A"), ""),
            call(1, None, "{\"a\": 1"),
            call(1, None, ", \"b\": 2}"),
            call(2, Some("toolu_01B"), ""),
            call(2, None, "{\"a\": 3, "),
            call(2, None, "\"b\": 4}"),
        ]
    );
    assert!(chunks.contains(&ModelChunk::Finish(FinishReason::ToolCalls)));
}

#[tokio::test]
async fn two_tool_use_blocks_are_run_and_their_results_and_signed_thinking_are_sent_back() {
    let mut first = thinking_then_text();
    // Thinking (block 0), then text and the tool uses instead of the final text.
    first.truncate(6);
    first.extend(two_tool_uses(1));
    let server = MockServer::start([Reply::sse(&first), text_reply("3 and 7.")]).await;
    agent_adds_twice(model(&server)).await;
    let second = &server.bodies()[1];
    // The runtime gives each call its own id; the wire pairs uses and results by it.
    let content = &second["messages"][1]["content"];
    let (a, b) = (
        content[2]["id"].as_str().unwrap().to_owned(),
        content[3]["id"].as_str().unwrap().to_owned(),
    );
    assert_ne!(a, b);
    assert_eq!(
        *content,
        json!([
            {"type": "thinking", "thinking": "Let me solve this step by step:\n\n1. 27 * 453 = 12231",
             "signature": "EqQBCgIYAhIM1gbcDa9GJwZA2b3h"},
            {"type": "text", "text": "Let me add both."},
            {"type": "tool_use", "id": a, "name": "add", "input": {"a": 1, "b": 2}},
            {"type": "tool_use", "id": b, "name": "add", "input": {"a": 3, "b": 4}}
        ])
    );
    assert_eq!(
        AnthropicWire.tool_results(second),
        results(&[(a.as_str(), "3"), (b.as_str(), "7")])
    );
}

#[tokio::test]
async fn a_failed_tool_call_is_sent_back_with_is_error() {
    let server = MockServer::start([
        Reply::sse(&[
            message_start(5),
            block_start(
                0,
                json!({"type": "tool_use", "id": "toolu_X", "name": "missing", "input": {}}),
            ),
            message_delta("tool_use", 9),
            message_stop(),
        ]),
        text_reply("Sorry."),
    ])
    .await;
    let agent = Agent::builder()
        .model(model(&server))
        .without_global_hooks()
        .build()
        .unwrap();
    agent.call(Msg::user("go")).await.unwrap();
    let body = &server.bodies()[1];
    let result = &body["messages"][2]["content"][0];
    assert_eq!(
        result["tool_use_id"],
        body["messages"][1]["content"][0]["id"]
    );
    assert_eq!(result["is_error"], true);
    assert!(result["content"].as_str().unwrap().contains("Unknown tool"));
}

#[tokio::test]
async fn an_overloaded_error_event_before_any_content_is_retried() {
    let server = MockServer::start([
        Reply::sse(&[
            message_start(25),
            event(json!({"type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        ]),
        text_reply("fine"),
    ])
    .await;
    let (chunks, err) = collect(&model(&server), ask("hi")).await;
    assert!(err.is_none(), "{err:?}");
    assert_eq!(text_of(&chunks), "fine");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn an_error_event_after_content_is_a_typed_error_and_is_not_retried() {
    let server = MockServer::start([
        Reply::sse(&[
            message_start(25),
            block_start(0, json!({"type": "text", "text": ""})),
            text_delta(0, "Part"),
            event(json!({"type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"}})),
        ]),
        text_reply("never"),
    ])
    .await;
    let (chunks, err) = collect(&model(&server), ask("hi")).await;
    let err = err.unwrap();
    assert_eq!(text_of(&chunks), "Part");
    assert_eq!(err.kind(), ModelErrorKind::Server);
    assert!(err.message().contains("Overloaded"), "{err}");
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn unknown_event_types_are_ignored() {
    let chunks = replay(
        model,
        &[
            message_start(3),
            event(json!({"type": "future_event", "payload": 1})),
            block_start(
                0,
                json!({"type": "server_tool_use", "id": "x", "name": "web"}),
            ),
            block_start(1, json!({"type": "text", "text": "Hi"})),
            delta(1, json!({"type": "citations_delta", "citation": {}})),
            message_delta("end_turn", 2),
            message_stop(),
        ],
    )
    .await;
    assert_eq!(text_of(&chunks), "Hi");
}

#[tokio::test]
async fn a_delta_without_a_block_index_is_a_stream_error_quoting_it() {
    let server = MockServer::start([Reply::sse(&[
        message_start(3),
        event(json!({"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}})),
    ])])
    .await;
    let (_, err) = collect(&model(&server), ask("hi")).await;
    let err = err.unwrap();
    assert_eq!(err.kind(), ModelErrorKind::Stream);
    assert!(err.message().contains("text_delta"), "{err}");
}

#[tokio::test]
async fn debug_output_never_shows_the_api_key() {
    let builder = AnthropicModel::builder()
        .api_key("sk-ant-secret")
        .model("claude");
    assert!(!format!("{builder:?}").contains("sk-ant-secret"));
    assert!(!format!("{:?}", builder.build().unwrap()).contains("sk-ant-secret"));
}

/// The answer of a structured call on this wire: the model calls the format's tool, its
/// input streamed as `input_json_delta`, and stops with `tool_use`.
fn structured_answer(name: &str, pieces: &[&str]) -> Vec<String> {
    let mut events = vec![
        message_start(50),
        block_start(
            0,
            json!({"type": "tool_use", "id": "toolu_01S", "name": name, "input": {}}),
        ),
    ];
    events.extend(
        pieces
            .iter()
            .map(|p| delta(0, json!({"type": "input_json_delta", "partial_json": p}))),
    );
    events.extend([block_stop(0), message_delta("tool_use", 20), message_stop()]);
    events
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct Verdict {
    approve: bool,
    reason: String,
}

#[tokio::test]
async fn a_structured_answer_given_as_the_format_tool_arrives_as_text_and_deserializes() {
    let server = MockServer::start([Reply::sse(&structured_answer(
        "Verdict",
        &["{\"approve\": fal", "se, \"reason\": \"over the cap\"}"],
    ))])
    .await;
    let agent = Agent::builder()
        .name("judge")
        .model(model(&server))
        .build()
        .unwrap();
    let typed = agent
        .run_typed::<Verdict>(vec![Msg::user("refund 5000?")], RunContext::new())
        .await
        .unwrap();
    assert!(!typed.value.approve);
    assert_eq!(typed.value.reason, "over the cap");
    assert!(
        typed.outcome.reply.tool_uses().is_empty(),
        "the format tool's call is the answer's text, never a tool call"
    );
    assert_eq!(typed.outcome.reason, StopReason::Final);
    let body = &server.bodies()[0];
    assert_eq!(
        body["tool_choice"],
        json!({"type": "tool", "name": "Verdict"})
    );
}

#[tokio::test]
async fn without_a_response_format_a_tool_named_like_one_stays_a_tool_call() {
    let chunks = replay(model, &structured_answer("Verdict", &["{}"])).await;
    assert!(
        chunks
            .iter()
            .any(|c| matches!(c, ModelChunk::ToolCall { name: Some(n), .. } if n == "Verdict"))
    );
    assert!(chunks.contains(&ModelChunk::Finish(FinishReason::ToolCalls)));
}
