//! `OpenAiChatModel`: the exact request body, and realistic chat-completions
//! transcripts replayed by the local server.

use rein::*;
use serde_json::{Value, json};

use crate::providers::mock::*;
use crate::support::*;

/// A chunk as OpenAI streams it (with the fields this provider ignores).
fn chunk(delta: Value, finish: Option<&str>) -> String {
    data(json!({
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk",
        "created": 1741569952, "model": "gpt-4o-2024-08-06", "service_tier": "default",
        "system_fingerprint": "fp_eb9dce56a8",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "usage": null
    }))
}

fn usage_chunk(prompt: u64, completion: u64) -> String {
    usage_chunk_with(prompt, 0, completion, 0)
}

fn usage_chunk_with(prompt: u64, cached: u64, completion: u64, reasoning: u64) -> String {
    data(json!({
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion.chunk",
        "created": 1741569952, "model": "gpt-4o-2024-08-06", "choices": [],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                  "total_tokens": prompt + completion,
                  "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": reasoning, "audio_tokens": 0}}
    }))
}

const DONE: &str = "data: [DONE]\n\n";

fn model(server: &MockServer) -> OpenAiChatModel {
    builder(server).build().unwrap()
}

fn builder(server: &MockServer) -> OpenAiChatModelBuilder {
    OpenAiChatModel::builder()
        .base_url(format!("{}/v1", server.url))
        .api_key("sk-test")
        .model("gpt-4o")
        .http(fast_http(1))
}

#[tokio::test]
async fn the_request_body_maps_messages_tools_and_options_exactly() {
    let server = MockServer::start([Reply::sse(&[
        chunk(json!({"content": "ok"}), Some("stop")),
        DONE.to_owned(),
    ])])
    .await;
    let mut options = GenerateOptions {
        temperature: Some(0.2),
        top_p: Some(0.9),
        top_k: Some(40),
        max_tokens: Some(256),
        reasoning_effort: Some("low".into()),
        seed: Some(7),
        stop: Some(vec!["END".into()]),
        frequency_penalty: Some(0.1),
        presence_penalty: Some(0.3),
        tool_choice: Some(ToolChoice::Tool("add".into())),
        parallel_tool_calls: Some(true),
        ..Default::default()
    };
    options.extra_headers.insert("x-team".into(), "core".into());
    options.extra_body.insert("user".into(), json!("u-42"));
    options.extra_body.insert("top_p".into(), json!(0.5));
    let request = ModelRequest {
        messages: [
            two_sums("call", None),
            vec![Msg::assistant("1+2=3."), Msg::user("Thanks")],
        ]
        .concat()
        .into(),
        tools: vec![add_schema_tool()].into(),
        options,
    };
    // Every option as given: the capability rules are tested in providers_capabilities.rs.
    let m = builder(&server)
        .capabilities(ModelCapabilities::PERMISSIVE)
        .build()
        .unwrap();
    assert_eq!(text_of(&stream_ok(&m, request.clone()).await), "ok");
    let expected = json!({
        "model": "gpt-4o",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 1+2 and 3+4?"},
            {"role": "assistant", "content": "Adding.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "add", "arguments": "{\"a\":1,\"b\":2}"}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "add", "arguments": "{\"a\": 3,"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "3"},
            {"role": "tool", "tool_call_id": "call_2", "content": "Invalid arguments"},
            {"role": "assistant", "content": "1+2=3."},
            {"role": "user", "content": "Thanks"}
        ],
        "tools": [{"type": "function", "function": {
            "name": "add", "description": "Adds two numbers.", "parameters": add_schema()}}],
        "tool_choice": {"type": "function", "function": {"name": "add"}},
        "parallel_tool_calls": true,
        "temperature": 0.2,
        "top_p": 0.5,
        "top_k": 40,
        "max_tokens": 256,
        "seed": 7,
        "stop": ["END"],
        "frequency_penalty": 0.1,
        "presence_penalty": 0.3,
        "reasoning_effort": "low",
        "user": "u-42"
    });
    let sent = &server.requests()[0];
    assert_eq!(sent.body, expected);
    assert_eq!(m.request_body(&request).unwrap(), expected);
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.headers["authorization"], "Bearer sk-test");
    assert_eq!(sent.headers["x-team"], "core");
    assert_eq!(sent.headers["accept"], "text/event-stream");
}

#[tokio::test]
async fn tool_options_are_left_out_without_tools_and_the_model_can_be_overridden_per_call() {
    let server = MockServer::start([]).await;
    let m = model(&server);
    let mut request = ask("hi");
    request.options = GenerateOptions {
        model: Some("gpt-4o-mini".into()),
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        ..Default::default()
    };
    let body = m.request_body(&request).unwrap();
    assert_eq!(body["model"], "gpt-4o-mini");
    assert!(body.get("tools").is_none());
    assert!(body.get("tool_choice").is_none());
    assert!(body.get("parallel_tool_calls").is_none());
    assert_eq!(m.name(), "gpt-4o");
    assert_eq!(m.provider(), "openai");
}

#[tokio::test]
async fn max_tokens_is_sent_as_max_completion_tokens_when_the_builder_asks() {
    let m = OpenAiChatModel::builder()
        .model("o3-mini")
        .max_completion_tokens(true)
        .build()
        .unwrap();
    let mut request = ask("hi");
    request.options.max_tokens = Some(99);
    let body = m.request_body(&request).unwrap();
    assert_eq!(body["max_completion_tokens"], 99);
    assert!(body.get("max_tokens").is_none());
    assert_eq!(m.url(), "https://api.openai.com/v1/chat/completions");
}

#[tokio::test]
async fn a_plain_text_transcript_streams_text_then_finish_then_usage_until_done() {
    let chunks = replay(
        model,
        &[
            chunk(
                json!({"role": "assistant", "content": "", "refusal": null}),
                None,
            ),
            chunk(json!({"content": "Hello"}), None),
            chunk(json!({"content": "! How can I"}), None),
            chunk(json!({"content": " help?"}), None),
            chunk(json!({}), Some("stop")),
            usage_chunk(9, 6),
            DONE.to_owned(),
        ],
    )
    .await;
    assert_eq!(
        chunks,
        vec![
            ModelChunk::Text("Hello".into()),
            ModelChunk::Text("! How can I".into()),
            ModelChunk::Text(" help?".into()),
            ModelChunk::Finish(FinishReason::Stop),
            ModelChunk::Usage(Usage::new(9, 6)),
        ]
    );
}

#[tokio::test]
async fn cached_prompt_tokens_and_reasoning_tokens_are_reported_in_the_usage() {
    let chunks = replay(
        model,
        &[
            chunk(json!({"content": "Hi"}), None),
            chunk(json!({}), Some("stop")),
            usage_chunk_with(1200, 1024, 300, 256),
            DONE.to_owned(),
        ],
    )
    .await;
    let usage = Usage {
        cached_input_tokens: 1024,
        reasoning_tokens: 256,
        ..Usage::new(1200, 300)
    };
    assert_eq!(chunks.last(), Some(&ModelChunk::Usage(usage)));
}

#[tokio::test]
async fn reasoning_content_and_reasoning_deltas_stream_as_thinking_before_the_text() {
    let chunks = replay(
        model,
        &[
            chunk(
                json!({"role": "assistant", "content": null, "reasoning_content": ""}),
                None,
            ),
            chunk(
                json!({"content": null, "reasoning_content": "The user greets; "}),
                None,
            ),
            chunk(
                json!({"content": null, "reasoning": "answer politely."}),
                None,
            ),
            chunk(json!({"content": "Hi!", "reasoning_content": null}), None),
            chunk(json!({}), Some("stop")),
            DONE.to_owned(),
        ],
    )
    .await;
    assert_eq!(
        chunks,
        vec![
            ModelChunk::Thinking("The user greets; ".into()),
            ModelChunk::Thinking("answer politely.".into()),
            ModelChunk::Text("Hi!".into()),
            ModelChunk::Finish(FinishReason::Stop),
        ]
    );
}

/// Two calls whose argument fragments alternate between the calls.
fn parallel_calls() -> Vec<String> {
    let frag = |i: u32, args: &str| {
        chunk(
            json!({"tool_calls": [{"index": i, "function": {"arguments": args}}]}),
            None,
        )
    };
    vec![
        chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": "call_A", "type": "function", "function": {"name": "add", "arguments": ""}}]}),
            None,
        ),
        chunk(
            json!({"tool_calls": [{"index": 1, "id": "call_B", "type": "function",
                "function": {"name": "add", "arguments": ""}}]}),
            None,
        ),
        frag(0, "{\"a\""),
        frag(1, "{\"a\": 3"),
        frag(0, ": 1, \"b\""),
        frag(1, ", \"b\": 4}"),
        frag(0, ": 2}"),
        chunk(json!({}), Some("tool_calls")),
        usage_chunk(30, 40),
        DONE.to_owned(),
    ]
}

#[tokio::test]
async fn two_parallel_tool_calls_with_interleaved_fragments_are_reassembled_by_index() {
    let server = MockServer::start([
        Reply::sse(&parallel_calls()),
        Reply::sse(&[
            chunk(json!({"content": "3 and 7."}), None),
            chunk(json!({}), Some("stop")),
            DONE.to_owned(),
        ]),
    ])
    .await;
    agent_adds_twice(model(&server)).await;
    let second = &server.bodies()[1];
    let calls = &second["messages"][1]["tool_calls"];
    let (a, b) = (
        calls[0]["id"].as_str().unwrap().to_owned(),
        calls[1]["id"].as_str().unwrap().to_owned(),
    );
    assert_ne!(a, b, "each call has its own id");
    assert_eq!(calls[0]["function"]["arguments"], "{\"a\":1,\"b\":2}");
    assert_eq!(calls[1]["function"]["arguments"], "{\"a\":3,\"b\":4}");
    assert_eq!(
        OpenAiWire.tool_results(second),
        results(&[(a.as_str(), "3"), (b.as_str(), "7")])
    );
}

#[tokio::test]
async fn a_usage_only_final_chunk_reports_usage_after_the_finish_reason() {
    let chunks = replay(model, &parallel_calls()).await;
    assert_eq!(
        &chunks[chunks.len() - 2..],
        [
            ModelChunk::Finish(FinishReason::ToolCalls),
            ModelChunk::Usage(Usage::new(30, 40))
        ]
    );
}

#[tokio::test]
async fn tool_calls_without_an_index_are_grouped_by_their_id() {
    let chunks = replay(
        model,
        &[
            chunk(
                json!({"tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "add", "arguments": "{\"a\": 1, \"b\": 2}"}},
               {"id": "c2", "type": "function",
                "function": {"name": "add", "arguments": "{\"a\": 5"}}]}),
                None,
            ),
            chunk(
                json!({"tool_calls": [{"function": {"arguments": ", \"b\": 6}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
            DONE.to_owned(),
        ],
    )
    .await;
    let indexes: Vec<usize> = chunks
        .iter()
        .filter_map(|c| match c {
            ModelChunk::ToolCall { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(indexes, [0, 1, 1]);
}

#[tokio::test]
async fn a_stream_without_done_after_a_finish_reason_is_complete() {
    let chunks = replay(
        model,
        &[
            chunk(json!({"content": "Done."}), None),
            chunk(json!({}), Some("length")),
        ],
    )
    .await;
    assert_eq!(
        chunks.last(),
        Some(&ModelChunk::Finish(FinishReason::Length))
    );
}

#[tokio::test]
async fn an_error_object_inside_the_stream_ends_it_with_a_typed_error() {
    let server = MockServer::start([Reply::sse(&[
        chunk(json!({"content": "Partial"}), None),
        data(json!({"error": {"message": "Rate limit reached for gpt-4o",
                              "type": "tokens", "code": "rate_limit_exceeded"}})),
    ])])
    .await;
    let (chunks, err) = collect(&model(&server), ask("hi")).await;
    let err = err.unwrap();
    assert_eq!(text_of(&chunks), "Partial");
    assert_eq!(err.kind(), ModelErrorKind::RateLimit);
    assert!(err.message().contains("Rate limit reached"), "{err}");
}

#[tokio::test]
async fn a_builder_without_a_model_or_with_a_bad_base_url_fails_with_invalid_config() {
    let err = OpenAiChatModel::builder().api_key("k").build().unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(err.message().contains("model"), "{err}");
    let err = OpenAiChatModel::builder()
        .model("m")
        .base_url("ftp://example.com")
        .build()
        .unwrap_err();
    assert_eq!(err.kind(), BuildErrorKind::InvalidConfig);
    assert!(err.message().contains("ftp://example.com"), "{err}");
}

#[tokio::test]
async fn without_an_api_key_no_authorization_header_is_sent() {
    let server = MockServer::start([Reply::sse(&[
        chunk(json!({"content": "hi"}), Some("stop")),
        DONE.to_owned(),
    ])])
    .await;
    let m = OpenAiChatModel::builder()
        .base_url(format!("{}/v1/", server.url))
        .model("llama3")
        .header("x-custom", "1")
        .build()
        .unwrap();
    let (_, err) = collect(&m, ask("hi")).await;
    assert!(err.is_none(), "{err:?}");
    let sent = &server.requests()[0];
    assert!(!sent.headers.contains_key("authorization"));
    assert_eq!(sent.headers["x-custom"], "1");
    assert_eq!(sent.path, "/v1/chat/completions");
}

#[tokio::test]
async fn debug_output_never_shows_the_api_key() {
    let builder = OpenAiChatModel::builder()
        .api_key("sk-secret-123")
        .model("gpt-4o");
    assert!(!format!("{builder:?}").contains("sk-secret-123"));
    let model = builder.build().unwrap();
    assert!(!format!("{model:?}").contains("sk-secret-123"));
}
