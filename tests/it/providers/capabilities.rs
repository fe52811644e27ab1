//! Model capabilities: requests a provider would reject are never sent. Each rule is
//! checked on the exact request body (`request_body()`); refused requests never reach
//! the server.

use rein::hooks::{DynamicOptionsConfig, DynamicOptionsHook};
use rein::*;
use serde_json::{Value, json};

use crate::providers::mock::*;

fn user_hi() -> Value {
    json!([{"role": "user", "content": "hi"}])
}

fn with(options: GenerateOptions) -> ModelRequest {
    ModelRequest {
        options,
        ..ask("hi")
    }
}

/// Every sampling hint, a token limit and a reasoning effort.
fn all_hints(effort: &str) -> GenerateOptions {
    GenerateOptions {
        temperature: Some(0.1),
        top_p: Some(0.5),
        top_k: Some(40),
        frequency_penalty: Some(0.2),
        presence_penalty: Some(0.3),
        reasoning_effort: Some(effort.into()),
        seed: Some(7),
        ..Default::default()
    }
}

#[cfg(feature = "openai")]
fn openai(name: &str) -> OpenAiChatModel {
    OpenAiChatModel::builder().model(name).build().unwrap()
}

#[cfg(feature = "anthropic")]
fn anthropic(name: &str) -> AnthropicModel {
    AnthropicModel::builder().model(name).build().unwrap()
}

#[cfg(feature = "openai")]
#[test]
fn an_openai_chat_model_is_not_sent_reasoning_effort_but_keeps_its_sampling_options() {
    let body = openai("gpt-4o-mini")
        .request_body(&with(all_hints("high")))
        .unwrap();
    assert_eq!(
        body,
        json!({
            "model": "gpt-4o-mini", "stream": true, "stream_options": {"include_usage": true},
            "messages": user_hi(), "temperature": 0.1, "top_p": 0.5, "top_k": 40, "seed": 7,
            "frequency_penalty": 0.2, "presence_penalty": 0.3
        })
    );
}

#[cfg(feature = "openai")]
#[test]
fn an_openai_reasoning_model_gets_no_sampling_options_and_max_completion_tokens() {
    let mut options = all_hints("high");
    options.max_tokens = Some(99);
    let body = openai("o3-mini").request_body(&with(options)).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "o3-mini", "stream": true, "stream_options": {"include_usage": true},
            "messages": user_hi(), "max_completion_tokens": 99, "seed": 7,
            "reasoning_effort": "high"
        })
    );
}

#[cfg(feature = "openai")]
#[test]
fn the_capabilities_follow_the_per_call_model_and_the_builder_overrides_the_table() {
    // A per-call override to a reasoning model applies that model's rules.
    let mut options = all_hints("low");
    options.model = Some("o4-mini".into());
    let body = openai("gpt-4o").request_body(&with(options)).unwrap();
    assert_eq!(body["model"], "o4-mini");
    assert_eq!(body["reasoning_effort"], "low");
    assert!(body.get("temperature").is_none(), "{body}");

    // A name the table does not know (a local server's) gets every option as given.
    let body = openai("local")
        .request_body(&with(all_hints("high")))
        .unwrap();
    for key in ["temperature", "top_p", "top_k", "reasoning_effort"] {
        assert!(body.get(key).is_some(), "{key} missing from {body}");
    }

    // The builder's capabilities replace the table.
    let m = OpenAiChatModel::builder()
        .model("gpt-4o-mini")
        .capabilities(ModelCapabilities::PERMISSIVE.sampling(false))
        .build()
        .unwrap();
    let body = m.request_body(&with(all_hints("high"))).unwrap();
    assert_eq!(body["reasoning_effort"], "high");
    assert!(body.get("temperature").is_none(), "{body}");
    assert_eq!(
        m.capabilities_for("anything"),
        ModelCapabilities::PERMISSIVE.sampling(false)
    );
}

#[cfg(feature = "openai")]
#[tokio::test]
async fn an_unknown_effort_level_for_an_openai_reasoning_model_is_refused_before_sending() {
    let server = MockServer::start([]).await;
    let m = OpenAiChatModel::builder()
        .base_url(format!("{}/v1", server.url))
        .model("o3")
        .http(fast_http(1))
        .build()
        .unwrap();
    let request = with(GenerateOptions {
        reasoning_effort: Some("extreme".into()),
        ..Default::default()
    });
    let err = m.request_body(&request).unwrap_err();
    assert_eq!(err.kind(), ModelErrorKind::BadRequest);
    assert!(
        err.message().contains("reasoning_effort") && err.message().contains("extreme"),
        "{err}"
    );
    let (_, err) = collect(&m, request).await;
    assert_eq!(err.unwrap().kind(), ModelErrorKind::BadRequest);
    assert!(server.requests().is_empty());
}

#[cfg(feature = "openai")]
#[tokio::test]
async fn the_default_precise_profile_of_dynamic_options_reaches_gpt_4o_mini_without_reasoning_effort()
 {
    let server = MockServer::start([Reply::sse(&[
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n"
            .to_owned(),
        "data: [DONE]\n\n".to_owned(),
    ])])
    .await;
    let m = OpenAiChatModel::builder()
        .base_url(format!("{}/v1", server.url))
        .model("gpt-4o-mini")
        .http(fast_http(1))
        .build()
        .unwrap();
    let hook = DynamicOptionsHook::new(DynamicOptionsConfig {
        enabled: true,
        ..Default::default()
    })
    .unwrap();
    let agent = Agent::builder()
        .name("cs")
        .model(m)
        .hook(hook)
        .build()
        .unwrap();
    let reply = agent.call(Msg::user("我要投诉")).await.unwrap();
    assert_eq!(reply.text(), "ok");
    let sent = &server.requests()[0].body;
    assert_eq!(sent["temperature"], 0.1, "the profile applied: {sent}");
    assert!(sent.get("reasoning_effort").is_none(), "{sent}");
}

#[cfg(feature = "anthropic")]
#[test]
fn extended_thinking_drops_the_temperature_top_p_and_top_k_the_api_forbids_with_it() {
    let body = anthropic("claude-sonnet-4-5")
        .request_body(&with(all_hints("high")))
        .unwrap();
    assert_eq!(
        body,
        json!({
            "model": "claude-sonnet-4-5", "stream": true,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "max_tokens": 4096 + 16384,
            "thinking": {"type": "enabled", "budget_tokens": 16384}
        })
    );
    // Values the API allows with thinking are kept.
    let mut options = all_hints("low");
    options.temperature = Some(1.0);
    options.top_p = Some(0.96);
    options.top_k = None;
    let body = anthropic("claude-sonnet-4-5")
        .request_body(&with(options))
        .unwrap();
    assert_eq!(
        (body["temperature"].clone(), body["top_p"].clone()),
        (json!(1.0), json!(0.96))
    );
}

#[cfg(feature = "anthropic")]
#[test]
fn a_claude_model_without_extended_thinking_is_not_sent_thinking_but_keeps_sampling() {
    let body = anthropic("claude-3-5-haiku-latest")
        .request_body(&with(all_hints("high")))
        .unwrap();
    assert_eq!(
        body,
        json!({
            "model": "claude-3-5-haiku-latest", "stream": true,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
            "max_tokens": 4096, "temperature": 0.1, "top_p": 0.5, "top_k": 40
        })
    );
}

#[cfg(feature = "anthropic")]
#[tokio::test]
async fn thinking_requests_that_cannot_be_made_valid_are_refused_naming_the_option() {
    let server = MockServer::start([]).await;
    let m = AnthropicModel::builder()
        .base_url(&server.url)
        .model("claude-opus-4-1")
        .http(fast_http(1))
        .build()
        .unwrap();
    let forced = ModelRequest {
        tools: vec![add_schema_tool()].into(),
        ..with(GenerateOptions {
            reasoning_effort: Some("medium".into()),
            tool_choice: Some(ToolChoice::Required),
            ..Default::default()
        })
    };
    let small_limit = with(GenerateOptions {
        reasoning_effort: Some("high".into()),
        max_tokens: Some(16384),
        ..Default::default()
    });
    let tiny_budget = with(GenerateOptions {
        reasoning_effort: Some("500".into()),
        ..Default::default()
    });
    for (request, option) in [
        (forced, "tool_choice"),
        (small_limit, "max_tokens"),
        (tiny_budget, "reasoning_effort"),
    ] {
        let err = m.request_body(&request).unwrap_err();
        assert_eq!(err.kind(), ModelErrorKind::BadRequest, "{err}");
        assert!(
            err.message().starts_with(option) || err.message().contains(option),
            "{err}"
        );
        let (_, err) = collect(&m, request).await;
        assert_eq!(err.unwrap().kind(), ModelErrorKind::BadRequest);
    }
    assert!(server.requests().is_empty());
}
